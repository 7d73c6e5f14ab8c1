"""Sub-commands of ``gridshift``: each module exposes ``command`` (a click command or group)."""
