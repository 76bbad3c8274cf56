"""The interactive API docs in a real browser (Debian's chromium through Playwright): Swagger UI loads
from the app's own files under the app's Content-Security-Policy, with every other origin blocked, and
an operator's token works through "Authorize"."""

from __future__ import annotations

from tests.e2e.test_console_ui import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    TOKEN,
    Served,
    playwright_sync,
    served,
)

__all__ = ["served"]  # the fixture, reused


def test_swagger_ui_works_offline_under_the_csp(served: Served) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            outside: list[str] = []

            def only_local(route: object) -> None:
                url = route.request.url  # type: ignore[attr-defined]
                if url.startswith(served.url):
                    route.continue_()  # type: ignore[attr-defined]
                else:  # a CDN request would fail here, as it would on an air-gapped cluster
                    outside.append(url)
                    route.abort()  # type: ignore[attr-defined]

            context.route("**/*", only_local)
            page = context.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(served.url + "/docs")
            playwright_sync.expect(page.locator(".swagger-ui .info .title")).to_contain_text(
                "TrainGuard advisor API"
            )
            playwright_sync.expect(page.locator(".opblock-summary-path").first).to_be_visible()
            # Try one read through the UI with a bearer token.
            page.locator("button.authorize").first.click()
            page.locator(".auth-container input").first.fill(TOKEN)
            page.locator(".auth-btn-wrapper button.authorize").first.click()
            page.locator(".btn-done").first.click()
            op = page.locator('.opblock-get:has(.opblock-summary-path[data-path="/api/v1/clusters"])').first
            op.locator(".opblock-summary").click()
            op.locator("button.try-out__btn").click()
            op.locator("button.execute").click()
            playwright_sync.expect(
                op.locator(".live-responses-table tbody td.response-col_status").first
            ).to_have_text("200")
            page.screenshot(path=str(ARTIFACTS / "api-docs.png"), full_page=False)
            assert outside == []
            assert [e for e in errors if "Content Security Policy" in e or "Refused" in e] == []
            assert errors == []
        finally:
            browser.close()
