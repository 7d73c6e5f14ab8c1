"""Use cases. Each takes a SQLAlchemy ``Session`` and plain values; views and tasks call these, never each other."""
