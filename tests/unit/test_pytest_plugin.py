"""The pytest plugin, driven through pytester, before any cluster starts: its options, its
header and the chaos marker's argument checks. Real runs through the plugin:
tests/integration/test_pytest_plugin.py."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("project_ini")


def test_options_are_offered_and_a_bad_runtime_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        ["*--bkchaos-runtime*", "*--bkchaos-store*", "*--bkchaos-time-limit*", "*--bkchaos-seed*"]
    )
    bad = pytester.runpytest("--bkchaos-runtime", "vmware")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--bkchaos-runtime=vmware: choose one of*local*"])


def test_header_names_runtime_store_and_seed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest("--bkchaos-seed", "77", "--bkchaos-store", "runs")
    result.stdout.fnmatch_lines(["bkchaos: runtime local, store runs, seed 77"])
    result.assert_outcomes(passed=1)


def test_bad_marker_arguments_fail_before_any_cluster_starts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.chaos(nemesis="meteor")  # one name where a list is due is fine
        def test_unknown_nemesis(): pass

        @pytest.mark.chaos(colour="red")
        def test_unknown_argument(): pass

        @pytest.mark.chaos(expect="maybe")
        def test_bad_expectation(): pass

        @pytest.mark.chaos(test_count=0)
        def test_no_runs(): pass
        """
    )
    result = pytester.runpytest("--bkchaos-store", "runs")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(
        [
            "bad @pytest.mark.chaos: unknown nemesis ?'meteor'?*",
            "bad @pytest.mark.chaos: unknown chaos arguments *colour*",
            "bad @pytest.mark.chaos: *expect='valid' or 'invalid'*expect='maybe'*",
            "bad @pytest.mark.chaos: test_count must be a whole number of runs >= 1, got 0",
        ]
    )
    assert "During handling" not in result.stdout.str()
    assert not (pytester.path / "runs").exists()
