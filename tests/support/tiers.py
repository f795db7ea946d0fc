"""The three test tiers, decided here and only here: by what a test needs, never by how long it took once.

* **unit** (no marker): in-process only. No child process, no server of another
  process, no wall-clock upper bound (fake clocks, model time). Runs on every core
  (pytest-xdist); ``bash scripts/test.sh --quick`` runs this tier alone.
* **stack** (``-m stack``): the simulator, ``serve`` and the tools as subprocesses,
  fake engines, the Debian tools used as static checkers (promtool, amtool, helm,
  docker-compose, hadolint). Assertions in model time or on ground truth the stack
  reports, never on this host's speed.
* **real** (``-m real``): the CPU vLLM, the llama.cpp server, Prometheus and
  Alertmanager servers, Chromium, installs from the package index.

How a test's tier is found (the highest tier any rule gives wins):

1. its file or folder in ``REAL_PATHS`` / ``STACK_PATHS`` (a folder's path ends in ``/``);
2. a fixture it uses in ``REAL_FIXTURES`` / ``STACK_FIXTURES`` (directly or through
   another fixture: pytest's closure of fixture names);
3. one node in ``REAL_NODES`` / ``STACK_NODES`` (``file::test``, for the few files
   whose other tests are unit tests).

Why a table and not decorators in each file: a marker written by hand drifts (the old
``integration``/``external``/``slow`` markers overlapped and disagreed). Why the table
can be trusted: ``process_guard`` makes every child process in a unit test an error
naming this file, and ``tests/test_tiers.py`` checks that every collected test is in
exactly one tier and every rule here still matches something.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIERS = ("unit", "stack", "real")
MARKED_TIERS = ("stack", "real")

#: files and folders (relative to the repository root) whose every test needs a real part
REAL_PATHS: tuple[str, ...] = (
    "tests/integration/",
    "tests/tune/test_tune_vllm.py",
    "tests/tune/test_tune_llamacpp.py",
    "tests/profile/test_profile_vllm_real.py",
    "tests/capacity/test_capacity_llamacpp.py",
    "tests/probe/test_probe_llamacpp.py",
    "tests/monitoring/test_prometheus_integration.py",
    "tests/monitoring/test_alertmanager_inhibition.py",
    "tests/monitoring/test_fleet_prometheus.py",
    "tests/monitoring/test_capacity_prometheus.py",
    "tests/plan/test_plan_prometheus.py",
    "tests/diagnosis/test_diagnosis_browser.py",
    "tests/report/test_report_browser.py",
    "tests/deploy/test_readme_install.py",
    "tests/deploy/test_runtime_install.py",
)
#: single tests that need a real part in files whose other tests do not
REAL_NODES: tuple[str, ...] = (
    "tests/profile/test_profile_serve.py::test_the_live_page_shows_the_last_split",
    "tests/diagnosis/test_diagnosis_multi_engine_serve.py::test_the_page_shows_every_engine_and_opens_one",
    "tests/reliability/test_serving_independent.py::test_every_read_answers_while_a_real_cpu_vllm_saturates_the_cores",
)
#: fixtures that start a real part (every test using one is real)
REAL_FIXTURES: frozenset[str] = frozenset({"cpu_vllm"})

#: files and folders whose every test starts a child process (the simulator, ``serve``, a tool, a checker)
STACK_PATHS: tuple[str, ...] = (
    "tests/capacity/test_capacity_serve.py",
    "tests/core/test_security_spray.py",
    "tests/core/test_security_spray_fresh.py",
    "tests/deploy/test_deploy_compose.py",  # docker-compose resolves the file in its fixtures
    "tests/deploy/test_deploy_compose_scripts.py",
    "tests/deploy/test_deploy_compose_stack.py",
    "tests/diagnosis/test_diagnosis_multi_engine_serve.py",
    "tests/diagnosis/test_diagnosis_scenarios.py",
    "tests/diagnosis/test_prefix_cache_stack.py",
    "tests/gpu/test_golden_exposition.py",
    "tests/kubernetes/test_k8s_promql.py",
    "tests/profile/test_profile_serve.py",
    "tests/ramp/test_ramp_errors.py",
    "tests/ramp/test_ramp_scenarios.py",
    "tests/reliability/test_concurrent_scrapers.py",
    "tests/reliability/test_engine_hardening_serve.py",
    "tests/reliability/test_fault_injection.py",
    "tests/reliability/test_fuzz_engine_path.py",
    "tests/reliability/test_nvml_faults.py",
    "tests/report/test_report_e2e.py",
    "tests/simulator/test_demo_tour.py",
    "tests/simulator/test_sim_scenarios.py",
    "tests/simulator/test_sim_setting_causes.py",
    "tests/tune/test_tune_apply.py",
    "tests/tune/test_tune_simulator.py",
    "tests/tune/test_tune_layout.py",
    "tests/tune/test_tune_apply_shell.py",  # every template shape through the real /bin/sh
    "tests/process/test_sampler_cost.py",  # a module fixture starts a process of many threads
    "tests/profile/test_profile_bounds_serve.py",
    "tests/tracing/test_tracing_serve.py",  # serve with its OTLP receivers
)
#: single tests that start a child process in files whose other tests do not
STACK_NODES: tuple[str, ...] = (
    # a child process: the CLI, serve, the simulator, a checker (promtool, amtool, helm, hadolint, ...)
    "tests/core/test_config.py::test_cli_exits_2_with_one_line",
    "tests/core/test_config_fuzz.py::test_the_real_cli_prints_one_line_and_exits_2",
    "tests/core/test_config_validation.py::test_cli_prints_one_line_and_exits_2",
    "tests/core/test_runtime_boundary.py::test_every_runtime_module_imports_without_the_tools",
    "tests/core/test_runtime_boundary.py::test_runtime_commands_run_without_the_tools",
    "tests/core/test_runtime_boundary.py::test_schema_command_prints_the_schema_without_the_tools",
    "tests/core/test_runtime_boundary.py::test_the_child_cannot_import_the_tools",
    "tests/core/test_runtime_boundary.py::test_tool_commands_without_the_tools_say_so_in_one_line",
    "tests/core/test_schema.py::test_schema_json_cli_lists_every_metric",
    "tests/core/test_security_tls.py::test_serve_honours_min_version_end_to_end",
    "tests/core/test_serve_startup.py::test_address_not_on_this_host_is_exit_4",
    "tests/core/test_serve_startup.py::test_bad_config_is_still_exit_2",
    "tests/core/test_serve_startup.py::test_help_documents_the_exit_statuses",
    "tests/core/test_serve_startup.py::test_port_in_use_is_one_line_and_exit_4_before_serving",
    "tests/core/test_serve_startup.py::test_serve_on_a_free_port_answers_and_ends_by_sigterm",
    "tests/core/test_server.py::test_metrics_text_passes_promtool_and_carries_values",
    "tests/core/test_server.py::test_tls_and_basic_auth_from_web_config",
    "tests/core/test_source_registry.py::test_serve_exits_2_with_one_line_for_a_missing_need",
    "tests/core/test_source_registry.py::test_serve_help_lists_every_switch_with_its_default",
    "tests/deploy/test_deploy_dockerfile.py::test_builder_stage_builds_an_installable_wheel_from_the_ignored_context",
    "tests/deploy/test_deploy_dockerfile.py::test_hadolint_passes",
    "tests/deploy/test_deploy_helm.py::test_core_objects_pass_kubernetes_validate_strict",
    "tests/deploy/test_deploy_helm.py::test_kubernetes_validate_catches_a_broken_object",
    "tests/deploy/test_deploy_helm.py::test_prometheus_rule_passes_promtool",
    "tests/deploy/test_deploy_helm.py::test_sidecar_example_renders_and_validates",
    "tests/deploy/test_deploy_helm_kubernetes.py::test_lint_and_kubernetes_validate_pass",
    "tests/deploy/test_deploy_helm_sync.py::test_sync_check_finds_and_sync_repairs_drift",
    "tests/deploy/test_deploy_helm_sync.py::test_sync_check_passes_on_the_tree",
    "tests/diagnosis/test_diagnosis_scope.py::test_cuda_visible_devices_of_the_process_when_nvml_is_absent",
    "tests/diagnosis/test_diagnosis_scope.py::test_nvml_process_list_names_the_gpus_of_the_engines_process_tree",
    "tests/engines/test_engine_settings.py::test_engine_source_publishes_served_and_command_line_settings",
    "tests/engines/test_engine_settings.py::test_read_process_reads_cmdline_and_only_the_named_environment",
    "tests/engines/test_finish_reasons.py::test_failures_on_triton_and_tgi_give_a_failed_ratio_in_the_recording_rule",
    "tests/kubernetes/test_k8s_discovery.py::test_the_process_sampler_finds_the_pid_through_the_cgroup",
    "tests/kubernetes/test_k8s_podresources_stubs.py::test_grpc_stub_calls_the_kubelets_method",
    "tests/kubernetes/test_k8s_podresources_stubs.py::test_shipped_module_matches_the_proto",
    "tests/monitoring/test_alert_rules.py::test_amtool_check_config",
    "tests/monitoring/test_alert_rules.py::test_generated_files_are_current_and_rules_read_known_metrics",
    "tests/monitoring/test_alert_rules.py::test_promtool_check_rules",
    "tests/monitoring/test_alert_rules.py::test_promtool_unit_tests_pass",
    "tests/monitoring/test_alert_rules.py::test_recording_rule_names_follow_level_metric_operation",
    "tests/monitoring/test_alert_rules.py::test_routing_by_severity_and_layer",
    "tests/monitoring/test_alert_rules.py::test_two_engines_on_one_exporter_page_once_for_the_degraded_engine",
    "tests/monitoring/test_alert_rules.py::test_unit_tests_fail_when_a_rule_is_broken",
    "tests/monitoring/test_dashboards_generated.py::test_check_passes_on_the_checked_in_files",
    "tests/monitoring/test_fleet_rules.py::test_fleet_alerts_route_as_tickets",
    "tests/monitoring/test_fleet_rules.py::test_promtool_check_rules",
    "tests/monitoring/test_fleet_rules.py::test_promtool_unit_tests_pass",
    "tests/monitoring/test_fleet_rules.py::test_unit_tests_fail_when_a_fleet_rule_is_broken",
    "tests/probe/test_probe_front_end.py::test_outside_engine_time_equals_the_delay_a_slow_front_end_adds",
    "tests/probe/test_probe_front_end.py::test_serve_through_a_slow_front_end_names_front_end_overhead",
    "tests/probe/test_probe_monitoring.py::test_promtool_cases_both_ways_and_they_bite",
    "tests/probe/test_probe_monitoring.py::test_the_hung_engine_page_goes_to_the_pager",
    "tests/process/test_process_sampler.py::test_an_idle_process_reads_near_zero",
    "tests/process/test_process_sampler.py::test_busiest_thread_of_a_child_process_is_found",
    "tests/process/test_process_sampler.py::test_pid_with_substring_falls_back_to_the_substring",
    "tests/process/test_process_sampler.py::test_substring_finds_the_process_again_after_a_restart",
    "tests/process/test_process_sampler.py::test_substring_picks_the_root_of_a_matching_tree",
    "tests/process/test_process_sampler.py::test_vanished_pid_is_a_source_fault_every_time",
    "tests/reliability/test_memtrim_policy.py::test_pinned_a_large_buffer_keeps_its_own_mapping_after_a_larger_one_was_freed",
    "tests/simulator/test_sim_cli.py::test_bad_values_exit_2_with_one_line",
    "tests/simulator/test_sim_cli.py::test_demo_runs_bounded_without_a_gpu_and_leaves_no_children",
    "tests/simulator/test_sim_cli.py::test_demo_sigterm_stops_every_child",
    "tests/simulator/test_sim_cli.py::test_demo_stops_with_one_line_when_its_exporter_cannot_start",
    "tests/simulator/test_sim_cli.py::test_demo_stops_with_one_line_when_its_port_is_taken",
    "tests/simulator/test_sim_cli.py::test_list_scenarios_names_every_contract_scenario",
    "tests/simulator/test_sim_cli.py::test_simulate_serves_and_stops_on_sigterm",
    "tests/test_support.py::test_child_output_goes_to_a_file_so_a_chatty_child_never_blocks",
    "tests/test_support.py::test_child_stop_kills_what_ignores_term_and_wait_ready_fails_at_once_on_exit",
    "tests/test_support.py::test_start_answering_waits_for_the_url_and_stops_what_never_answers",
    "tests/tune/test_tune_cli.py::test_tune_number_flags_refuse_what_is_no_length_or_count",
    # in one process, but a live loop of seconds (a load, a soak, a hypothesis search): over the unit budget
    # in one process, but 1-2 s on a quiet 2-core host and more beside other work: CPU-heavy (a 2 MB
    # body under tracemalloc, a rate-limited bcrypt spray, YAML nested 20 000 deep, a hypothesis
    # search) or waiting out real deadlines of a second or more; too near the unit budget to stay there
    "tests/reliability/test_engine_hardening_memory.py::test_a_failed_scrape_holds_nothing_after_it_returns",
    "tests/core/test_security_auth.py::test_a_spray_gets_at_most_its_share_of_a_core",
    "tests/core/test_config_fuzz.py::test_a_file_that_is_not_utf8_or_not_sane_yaml_is_one_line",
    "tests/core/test_config_fuzz.py::test_property_any_value_for_any_yaml_key_is_one_line",
    "tests/core/test_config_fuzz.py::test_a_web_config_file_that_is_not_utf8_or_not_sane_yaml_is_one_line",
    "tests/kubernetes/test_k8s_hostile.py::test_110_pods_with_256_kib_of_annotations_each",
    "tests/kubernetes/test_k8s_hostile.py::test_bad_pods_never_stop_discovery_across_refreshes",
    "tests/kubernetes/test_k8s_discovery.py::test_annotated_pods_become_labelled_engines_and_go_away",
    "tests/engines/test_engine_property.py::test_generated_expositions_of_wanted_names",
    "tests/engines/test_llamacpp_side_fetch_deadline.py::test_both_side_fetches_end_within_the_one_deadline",
    "tests/probe/test_probe_source.py::test_a_runner_whose_probes_outlast_the_interval_never_overlaps_them",
    "tests/core/test_liveness_hang.py::test_a_hung_sample_reads_down_while_it_hangs_and_recovers",
    "tests/loadgen/test_loadgen.py::test_duration_bounds_the_run_and_cancels_what_is_in_flight",
    "tests/profile/test_profile_auth.py::test_profile_needs_the_exporters_credentials",
    "tests/core/test_config_fuzz.py::test_property_any_string_for_any_flag_or_variable_is_one_line",
    "tests/diagnosis/test_diagnosis_window.py::test_the_window_stays_bounded_whatever_an_engine_publishes",
    "tests/engines/test_llamacpp_side_fetch_deadline.py::test_a_slow_side_fetch_degrades_only_the_slot_metrics",
    "tests/kubernetes/test_k8s_settings.py::test_a_one_second_discovery_interval_reads_the_pod_list_about_every_second",
    "tests/loadgen/test_loadgen.py::test_429_is_recorded_as_rejected_after_retries",
    "tests/loadgen/test_loadgen.py::test_drain_is_bounded_by_the_request_timeout_and_retries_nothing",
    "tests/loadgen/test_loadgen.py::test_drain_lets_requests_in_flight_finish_after_the_deadline",
    "tests/loadgen/test_loadgen.py::test_open_loop_rate_and_stop_event",
    "tests/loadgen/test_loadgen.py::test_timeouts_are_retried_and_abort_on_the_server",
    "tests/reliability/test_engine_family_budget.py::test_the_dropped_family_costs_no_more_memory_than_a_refused_body_of_its_size",
    "tests/reliability/test_engine_nonfinite_diagnosis.py::test_non_finite_engine_values_keep_diagnosis_200_and_strict_json",
    "tests/report/test_report_hostile.py::test_a_trickling_answer_ends_at_the_timeout",
    "tests/report/test_report_hostile.py::test_report_files_never_hold_the_url_password",
    "tests/simulator/test_sim_api.py::test_queue_limit_answers_429_and_the_queue_stays_bounded",
    "tests/simulator/test_sim_calibration.py::test_live_decode_phase_within_20_percent_of_the_trace",
    "tests/simulator/test_sim_calibration.py::test_live_prefill_phase_within_20_percent_of_the_trace",
    "tests/simulator/test_sim_llamacpp_slots.py::test_busy_slots_under_load_reach_the_exporter_as_slot_evidence",
)
#: fixtures that start a child process
STACK_FIXTURES: frozenset[str] = frozenset()


def _relative(item: pytest.Item) -> str:
    return Path(str(item.path)).resolve().relative_to(ROOT).as_posix()


def _node(item: pytest.Item) -> str:
    """``file::test`` without the parameters: what the ``*_NODES`` tables name."""
    name = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    return f"{_relative(item)}::{name}"


def _under(path: str, rules: tuple[str, ...]) -> str | None:
    for rule in rules:
        if path == rule or (rule.endswith("/") and path.startswith(rule)):
            return rule
    return None


def tier_of(item: pytest.Item) -> tuple[str, str]:
    """(tier, the rule that decided it) for one collected test."""
    path, node = _relative(item), _node(item)
    fixtures = set(getattr(item, "fixturenames", ()))
    for tier, paths, nodes, named in (
        ("real", REAL_PATHS, REAL_NODES, REAL_FIXTURES),
        ("stack", STACK_PATHS, STACK_NODES, STACK_FIXTURES),
    ):
        if rule := _under(path, paths):
            return tier, f"path {rule}"
        if node in nodes:
            return tier, f"node {node}"
        if used := sorted(fixtures & named):
            return tier, f"fixture {used[0]}"
    return "unit", "no rule: in-process"


#: stack files whose tests each run a whole scenario stack (simulator, serve, a load generator) and
#: read a verdict from it: one xdist worker runs them one after another (``--dist loadgroup``).
#: Why: one such stack keeps about 1.5 cores busy (the simulator 0.75 of a core, its streaming
#: load generator up to 0.9, measured on power_throttled), so three at once on a 2-core runner
#: starve one another. Starved, a closed loop's clients come back late, the engine's queue runs
#: short, and the scenario's own physics changes (a few requests waiting with the KV cache free
#: is what the slots-full cause describes): the verdict then follows, rightly, a different
#: scenario. Beside one such stack the other workers run the lighter stack tests.
SCENARIO_STACK_PATHS: tuple[str, ...] = (
    "tests/diagnosis/test_diagnosis_scenarios.py",
    "tests/diagnosis/test_prefix_cache_stack.py",
    "tests/simulator/test_demo_tour.py",
    # tune reads communication_bound from a link kept busy: starved, the group idles and its link use falls
    "tests/tune/test_tune_layout.py",
)
SCENARIO_GROUP = "scenario_stacks"


def assign(items: list[pytest.Item]) -> None:
    """Mark each item with its tier (unit: no marker) and, for the scenario stacks, their one xdist
    group; a hand-written tier marker is an error."""
    for item in items:
        if _relative(item) in SCENARIO_STACK_PATHS:
            item.add_marker(pytest.mark.xdist_group(SCENARIO_GROUP))
        written = [m.name for m in item.iter_markers() if m.name in MARKED_TIERS]
        if written:
            raise pytest.UsageError(
                f"{item.nodeid}: tier marker {written[0]!r} written by hand; tests/support/tiers.py assigns tiers"
            )
        tier, why = tier_of(item)
        item.stash[TIER_KEY] = (tier, why)
        if tier != "unit":
            item.add_marker(getattr(pytest.mark, tier))


TIER_KEY = pytest.StashKey[tuple[str, str]]()


def tiers_of(item: pytest.Item) -> list[str]:
    """The tiers an item is in, read from its markers (unit: none of the marked ones)."""
    marked = [name for name in MARKED_TIERS if item.get_closest_marker(name) is not None]
    return marked or ["unit"]


# --------------------------------------------------------------------------- the unit tier's guard


#: programs a library runs once for itself, not a part of ours: ctypes.util.find_library's
#: ``ldconfig -p``, matplotlib's ``fc-list`` while it builds its font cache
LIBRARY_HELPERS = frozenset({"ldconfig", "fc-list"})


def _library_helper(args: object) -> bool:
    """Whether Popen's ``args`` (a command string or an argv) runs one of LIBRARY_HELPERS."""
    if isinstance(args, (str, bytes)):
        words = os.fsdecode(args).split()
    elif isinstance(args, (list, tuple)):
        words = [os.fsdecode(a) for a in args[:1]]
    else:
        words = []
    return bool(words) and os.path.basename(words[0]) in LIBRARY_HELPERS


class ChildProcessInUnitTest(AssertionError):
    """A unit test started a child process: it belongs to the stack or real tier."""


@contextmanager
def process_guard(nodeid: str) -> Iterator[None]:
    """Refuse every way Python starts a child process while a unit test runs.

    Why: the unit tier's promise (in-process, both cores, minutes) holds only while
    nothing in it forks; this turns a wrong tier into an error that names the fix.
    """

    def refuse(what: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            if what.endswith("Popen.__init__") and _library_helper(args[1] if len(args) > 1 else kwargs.get("args")):
                return original(*args, **kwargs)
            raise ChildProcessInUnitTest(
                f"{nodeid} started a child process ({what}) but is in the unit tier: "
                "name its file, test or fixture in tests/support/tiers.py (STACK_* or REAL_*)"
            )

        return refused

    saved: list[tuple[Any, str, Any]] = [
        (subprocess.Popen, "__init__", subprocess.Popen.__init__),
        (os, "fork", os.fork),
        (os, "posix_spawn", os.posix_spawn),
        (os, "posix_spawnp", os.posix_spawnp),
        (os, "system", os.system),
    ]
    for owner, name, original in saved:
        setattr(owner, name, refuse(f"{getattr(owner, '__name__', owner)}.{name}", original))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
