"""The dashboard in a real browser: sign in, submit with a preview, confirm, see the job planned, open its receipt,
download the month's PDF report and render it with pdftoppm; the layout at 1280 px and 390 px."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.web.conftest import shot, sign_in

pytestmark = pytest.mark.browser


def test_sign_in_rejects_a_bad_token_and_protects_pages(page, live_server):
    page.goto(live_server.url + "/ui/plan")
    assert "/ui/signin" in page.url
    page.fill("#token", "gs_wrong_token")
    page.click("#signin-form button[type=submit]")
    assert page.locator(".error").inner_text().startswith("That token is invalid")
    # The API refuses a dashboard session's write without the CSRF header.
    sign_in(page, live_server, "ml-platform", "/ui/jobs")
    status = page.evaluate("""async () => (await fetch('/api/v1/jobs', {method: 'POST', credentials: 'same-origin',
        headers: {'Content-Type': 'application/json'}, body: '{}'})).status""")
    assert status == 403


def test_overview_shows_every_region_with_charts(page, live_server):
    sign_in(page, live_server, "ml-platform")
    page.wait_for_selector("section.region")
    regions = page.locator("section.region")
    assert regions.count() == 5
    for i in range(regions.count()):
        assert regions.nth(i).locator(".main-svg").count() >= 3  # price, carbon, power vs budget
    assert "h100" in regions.first.locator("table").inner_text()
    page.wait_for_timeout(300)
    shot(page, "overview")


def test_submit_preview_confirm_plan_receipt_and_pdf_report(page, live_server, tmp_path):
    sign_in(page, live_server, "ops", "/ui/submit")
    page.wait_for_selector("#f-regions input")
    page.fill("#f-name", "browser-train-1")
    page.fill("#f-command", "python train.py")
    page.fill("#f-gpus", "4")
    page.fill("#f-hours", "16")
    page.click("#preview-btn")
    table = page.wait_for_selector("#preview-table")
    text = table.inner_text()
    assert "Gridshift plan" in text and "Run now" in text
    assert re.search(r"(de-fra|fr-par|es-mad|fi-ham|pl-waw)", text)
    assert page.is_enabled("#confirm-btn")
    shot(page, "preview")

    page.click("#confirm-btn")
    link = page.wait_for_selector("#submitted-msg a")
    job_id = int(link.get_attribute("href").rsplit("/", 1)[1])

    page.goto(live_server.url + "/ui/plan")
    page.click("#replan-btn")
    row = page.wait_for_selector(f"#assign-table tr[data-job-id='{job_id}']", timeout=60_000)
    assert "browser-train-1" in row.inner_text()
    assert "browser-train-1" in page.locator("#gantt").inner_text()

    page.goto(live_server.url + "/ui/jobs")
    job_row = page.wait_for_selector(f"#jobs-table tr[data-job-id='{job_id}']")
    assert "planned" in job_row.inner_text()

    page.click(f"#jobs-table tr[data-job-id='{job_id}'] a")
    page.wait_for_selector("#receipt-table")
    assert page.locator("#receipt-basis").inner_text() == "planned"
    assert "Run now" in page.locator("#receipt-table").inner_text()
    assert "pending" in page.locator("#timeline").inner_text() and "planned" in page.locator("#timeline").inner_text()
    # the plan that planned the job is one click away
    plan_link = page.locator("#timeline a[href^='/ui/plan?id=']").last
    plan_id = int(plan_link.get_attribute("href").rsplit("=", 1)[1])
    plan_link.click()
    page.wait_for_selector(f"#assign-table tr[data-job-id='{job_id}']")
    assert page.locator("#plan-summary").inner_text().startswith(f"Plan #{plan_id}")

    page.goto(live_server.url + "/ui/reports")
    page.wait_for_selector("#report-summary")
    month = datetime.now(UTC).strftime("%Y-%m")
    assert month in page.locator("#report-summary").inner_text()
    with page.expect_download() as dl:
        page.click("#pdf-link")
    pdf = tmp_path / "report.pdf"
    dl.value.save_as(pdf)
    assert pdf.read_bytes().startswith(b"%PDF")
    pdftoppm = shutil.which("pdftoppm")
    if pdftoppm is None:
        pytest.fail("pdftoppm is missing: apt-get install -y poppler-utils")
    subprocess.run([pdftoppm, "-png", "-r", "40", "-f", "1", "-l", "1", str(pdf), str(tmp_path / "page")],
                   check=True, timeout=60)
    pngs = list(tmp_path.glob("page*.png"))
    assert len(pngs) == 1 and pngs[0].stat().st_size > 2000


def test_secret_env_is_sent_with_the_job_only_and_never_shown_back(page, live_server):
    """The submit form's secret environment goes with the confirmed job alone (not the preview), is stored (the job
    says ``has_secret_env``) and appears in no answer or page afterwards; a malformed line is refused by name."""
    secret = "hf-browser-secret-5b0e"
    bodies: list[tuple[str, str]] = []
    page.on("request", lambda r: bodies.append((r.url, r.post_data or "")) if r.method == "POST" else None)
    sign_in(page, live_server, "ops", "/ui/submit")
    page.wait_for_selector("#f-regions input")
    page.fill("#f-name", "browser-secret-1")
    page.fill("#f-command", "python train.py")
    page.fill("#f-secret-env", "not a pair")
    page.click("#preview-btn")
    page.wait_for_selector("#confirm-btn:not([disabled])")
    page.click("#confirm-btn")
    assert "secret_env line 1" in page.wait_for_selector("#form-errors").inner_text()
    page.fill("#f-secret-env", f"HF_TOKEN={secret}\n\nWANDB_KEY=w=1")
    page.click("#preview-btn")
    page.wait_for_selector("#confirm-btn:not([disabled])")
    page.click("#confirm-btn")
    link = page.wait_for_selector("#submitted-msg a")
    job_id = int(link.get_attribute("href").rsplit("/", 1)[1])
    assert page.input_value("#f-secret-env") == ""
    previews = [b for u, b in bodies if u.endswith("/api/v1/plans/preview")]
    (sent,) = [json.loads(b) for u, b in bodies if u.endswith("/api/v1/jobs")]
    assert previews and all(secret not in b for b in previews)
    assert sent["secret_env"] == {"HF_TOKEN": secret, "WANDB_KEY": "w=1"}
    page.goto(f"{live_server.url}/ui/jobs/{job_id}")
    page.wait_for_selector("#timeline")
    answers = page.evaluate(f"""async () => Promise.all(['/api/v1/jobs/{job_id}', '/api/v1/jobs?limit=200',
        '/api/v1/jobs/{job_id}/events'].map(async (u) => (await fetch(u)).text()))""")
    assert json.loads(answers[0])["has_secret_env"] is True
    assert secret not in page.content() and not any(secret in a for a in answers)


def test_pages_fit_a_390px_phone(browser, live_server):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    try:
        sign_in(page, live_server, "ml-platform")
        for path in ["/", "/ui/submit", "/ui/jobs", "/ui/plan", "/ui/reports"]:
            page.goto(live_server.url + path)
            page.wait_for_load_state("networkidle")
            overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, f"{path} is {overflow} px wider than the screen"
            assert page.locator("nav a").first.is_visible()
    finally:
        context.close()


def test_the_upload_button_works_before_the_fleet_has_loaded(page, live_server, tmp_path):
    # a batch upload needs no region or hardware list: while that list is still on its way (held here), a click on
    # Upload must already be handled (it was not wired until the fleet arrived, so an early click did nothing)
    held = []
    page.route("**/api/v1/hardware", lambda route: held.append(route))
    sign_in(page, live_server, "render-farm", "/ui/submit")
    bad = tmp_path / "bad.csv"
    bad.write_text("name,command,gpu_count,reference_gpu_hours,release_at,deadline_at\n"
                     "r1,true,x,4,2030-01-01 10:00,2030-01-02 10:00\n")
    page.set_input_files("#batch-file", str(bad))
    page.click("#batch-btn")
    assert "gpu_count" in page.wait_for_selector("#batch-error", timeout=10_000).inner_text()
    assert held, "the hardware list was not asked for"
    for route in held:  # let the list through: the page then fills its choices as usual
        route.continue_()
    page.wait_for_selector("#f-hardware input[type=checkbox]")


def test_batch_upload_reads_times_in_the_users_zone_and_names_bad_lines(page, live_server, tmp_path):
    sign_in(page, live_server, "render-farm", "/ui/submit")
    berlin = ZoneInfo("Europe/Berlin")  # the browser context's time zone (see the page fixture)
    day = (datetime.now(berlin) + timedelta(days=1)).date()
    release = datetime.combine(day, time(10, 0), berlin)
    bad = tmp_path / "bad.csv"
    bad.write_text("name,command,gpu_count,reference_gpu_hours,release_at,deadline_at\n"
                   f"r1,true,2,4,{day} 10:00,{day + timedelta(days=1)} 10:00\n"
                   f"r2,true,100000,4,{day} 10:00,{day + timedelta(days=1)} 10:00\n")
    page.set_input_files("#batch-file", str(bad))
    page.click("#batch-btn")
    err = page.wait_for_selector("#batch-error").inner_text()
    assert "jobs[1].gpu_count" in err and "jobs[0]" not in err
    good = tmp_path / "good.csv"
    good.write_text("name,command,workload_class,gpu_count,reference_gpu_hours,release_at,deadline_at,allowed_regions\n"
                    f"r1,blender -b scene.blend,rendering,2,4,{day} 10:00,{day + timedelta(days=1)} 10:00,fr-par;es-mad\n"
                    f"r2,blender -b scene.blend,rendering,1,2,{day} 10:00,{day + timedelta(days=1)} 10:00,\n")
    page.set_input_files("#batch-file", str(good))
    page.click("#batch-btn")
    assert "Stored 2 jobs" in page.wait_for_selector("#batch-ok").inner_text()
    page.click("#batch-ok a")
    page.wait_for_selector("#jobs-table tr[data-job-id]")
    assert page.locator("#jobs-table tr[data-job-id]").count() == 2
    jobs = page.evaluate("async () => (await (await fetch('/api/v1/jobs?limit=10')).json()).items")
    first = next(j for j in jobs if j["name"] == "r1")
    assert datetime.fromisoformat(first["release_at"]) == release  # 10:00 Berlin, stored as UTC
    assert first["allowed_regions"] == ["fr-par", "es-mad"]
    as_json = tmp_path / "jobs.json"
    as_json.write_text(json.dumps({"jobs": [{"name": "<img src=x onerror=alert(1)>j1", "command": "true", "gpu_count": 1,
                                             "reference_gpu_hours": 2,
                                             "release_at": release.isoformat(),
                                             "deadline_at": (release + timedelta(days=1)).isoformat()}]}))
    page.goto(live_server.url + "/ui/submit")
    page.set_input_files("#batch-file", str(as_json))
    page.click("#batch-btn")
    assert "Stored 1 job (" in page.wait_for_selector("#batch-ok").inner_text()
    page.goto(live_server.url + "/ui/jobs")
    page.wait_for_selector("#jobs-table tr[data-job-id]")
    assert "<img src=x onerror=alert(1)>j1" in page.locator("#jobs-table").inner_text()  # shown as text
    assert page.locator("#jobs-table img").count() == 0


def test_api_docs_page_works_offline(page, live_server):
    page.goto(live_server.url + "/api/v1/docs")
    title = page.wait_for_selector(".swagger-ui .info .title")
    assert "Gridshift" in title.inner_text()
    assert page.locator(".opblock-tag").count() >= 5  # one section per API blueprint
