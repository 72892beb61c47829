"""A session whose tests were all skipped exits 77, which ctest reports as
SKIPPED (SKIP_RETURN_CODE): a missing client never counts as a pass."""


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    skipped = len(reporter.stats.get("skipped", []))
    passed = len(reporter.stats.get("passed", []))
    if skipped > 0 and passed == 0:
        session.exitstatus = 77
