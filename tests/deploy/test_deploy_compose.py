"""docker-compose.yml: validated by docker-compose 1.29 and the compose-spec JSON schema;
the Prometheus and Alertmanager configs it mounts checked by promtool and amtool in the
file layout the containers see; every command it runs parsed by the exporter's own CLI."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy.deploy_helpers import COMPOSE_FILE, DASHBOARDS_JSON, ROOT, binds, compose_config, dashboard_sources, run, tool

DEMO = {"simulator", "load", "exporter", "prometheus", "alertmanager", "webhook", "grafana"}
GPU = {"vllm", "exporter-gpu", "load-gpu"}


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return compose_config()


@pytest.fixture(scope="module")
def gpu_config() -> dict[str, Any]:
    return compose_config("gpu")


def mirror(service: dict[str, Any], root: Path) -> None:
    """Lay the service's bind mounts out under root as the container sees them."""
    for target, source in binds(service).items():
        assert source.exists(), f"{source} is mounted but does not exist"
        link = root / target.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(source)


def flag(service: dict[str, Any], name: str) -> str:
    command: list[str] = service["command"]
    for arg in command:
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} not in {service['command']}")


# --------------------------------------------------------------------------- validity


@pytest.mark.parametrize("profiles", [(), ("gpu",)], ids=["default", "gpu"])
def test_docker_compose_config_is_valid(profiles: tuple[str, ...]) -> None:
    argv = [tool("docker-compose"), "-f", str(COMPOSE_FILE)]
    for p in profiles:
        argv += ["--profile", p]
    result = run(*argv, "config", "-q")
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_spec_schema() -> None:
    result = run(tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_profiles_split_demo_and_gpu(gpu_config: dict[str, Any]) -> None:
    services = gpu_config["services"]
    assert {n for n, s in services.items() if not s.get("profiles")} == DEMO
    assert {n for n, s in services.items() if s.get("profiles") == ["gpu"]} == GPU


def test_ports_bind_to_localhost_unless_asked(config: dict[str, Any], gpu_config: dict[str, Any]) -> None:
    published = [p for s in gpu_config["services"].values() for p in s.get("ports", [])]
    assert len(published) == 7
    assert all(p.startswith("127.0.0.1:") for p in published), published
    opened = compose_config("gpu", env={"BIND_ADDRESS": "0.0.0.0"})
    assert all(p.startswith("0.0.0.0:") for s in opened["services"].values() for p in s.get("ports", []))


def test_images_are_pinned_and_the_exporter_is_built_here(gpu_config: dict[str, Any]) -> None:
    built = {}
    for name, service in gpu_config["services"].items():
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        if "build" in service:
            assert Path(service["build"]["context"]) == ROOT
            built[name] = (image, tuple(sorted((service["build"].get("args") or {}).items())))
            continue
        assert repo and tag and tag != "latest" and re.search(r"\d+\.\d+", tag), f"{name}: {image}"
    # the simulator needs the tools extra (Dockerfile EXTRAS=tools); every other service runs
    # the production image, the runtime only
    assert built.pop("simulator") == ("llm-layer-exporter:local-tools", (("EXTRAS", "tools"),))
    assert built and set(built.values()) == {("llm-layer-exporter:local", ())}, built


# --------------------------------------------------------------------------- the demo wiring


def _argv(service: dict[str, Any]) -> list[str]:
    return list(service.get("command") or [])


def test_simulator_command_is_a_valid_simulate_invocation(config: dict[str, Any]) -> None:
    from exporter.cli import build_parser

    argv = _argv(config["services"]["simulator"])
    args = build_parser(argv).parse_args(argv)
    assert args.command == "simulate"
    assert (args.scenario, args.dialect, args.listen_address) == ("healthy", "vllm", "0.0.0.0:8000")
    with_scenario = compose_config(env={"SCENARIO": "kv_pressure"})
    assert "kv_pressure" in _argv(with_scenario["services"]["simulator"])


def test_exporter_reads_the_simulator(config: dict[str, Any], tmp_path: Path) -> None:
    from exporter.cli import build_parser
    from exporter.config import load_config

    service = config["services"]["exporter"]
    mirror(service, tmp_path)
    argv = [a.replace("/etc/", f"{tmp_path}/etc/") for a in _argv(service)]
    cfg = load_config(build_parser(argv).parse_args(argv), environ={})
    assert cfg.gpu_source == "sim:http://simulator:8000"
    (engine,) = cfg.engines
    assert engine.url == "http://simulator:8000/metrics" and engine.type == "vllm"
    assert engine.process, "the process sampler watches the simulator"
    assert service["pid"] == "service:simulator"
    assert service["depends_on"]["simulator"]["condition"] == "service_healthy"
    assert cfg.port == 9750 and "127.0.0.1:9750:9750/tcp" in service["ports"]


def test_load_targets_the_simulator_with_its_script(config: dict[str, Any]) -> None:
    load = config["services"]["load"]
    assert load["entrypoint"] == ["python", "/opt/compose/load.py"]
    assert binds(load)["/opt/compose/load.py"] == ROOT / "deploy" / "compose" / "load.py"
    assert load["command"][:2] == ["--target", "http://simulator:8000"]


def test_gpu_profile_runs_a_real_vllm_and_reads_real_gpus(gpu_config: dict[str, Any]) -> None:
    from exporter.cli import build_parser
    from exporter.config import load_config

    services = gpu_config["services"]
    vllm, exporter = services["vllm"], services["exporter-gpu"]
    assert vllm["image"].startswith("vllm/vllm-openai:v")
    argv = _argv(exporter)
    cfg = load_config(build_parser(argv).parse_args(argv), environ={})
    assert cfg.gpu_source == "auto"
    assert [e.url for e in cfg.engines] == ["http://vllm:8000/metrics"] and cfg.engines[0].process
    assert exporter["pid"] == "service:vllm"
    for service in (vllm, exporter):
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert "utility" in exporter["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"]
    assert services["load-gpu"]["command"][:2] == ["--target", "http://vllm:8000"]
    assert not exporter.get("privileged") and not exporter.get("cap_add")


# --------------------------------------------------------------------------- Prometheus, Alertmanager, Grafana


def test_prometheus_uses_the_shipped_rules_and_passes_promtool(config: dict[str, Any], tmp_path: Path) -> None:
    service = config["services"]["prometheus"]
    mounted = binds(service)
    rules = sorted((ROOT / "alerts").glob("*_rules.yml"))
    assert {p.name for p in rules} == {"recording_rules.yml", "alerting_rules.yml", "fleet_rules.yml"}
    assert set(rules) <= set(mounted.values()), "every alerts/*_rules.yml is mounted, not a copy"
    mirror(service, tmp_path)
    config_file = tmp_path / flag(service, "--config.file").lstrip("/")
    result = run(tool("promtool"), "check", "config", str(config_file))
    assert result.returncode == 0, result.stdout + result.stderr
    for rule in rules:
        assert re.search(rf"Checking .*{rule.name}\n\s+SUCCESS: [1-9]\d* rules found", result.stdout), result.stdout


def test_prometheus_scrapes_the_exporters_as_the_alerts_job(gpu_config: dict[str, Any]) -> None:
    prom = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    job = yaml.safe_load((ROOT / "alerts" / "config.yaml").read_text())["exporter_job"]
    scrape = next(s for s in prom["scrape_configs"] if s["job_name"] == job)
    (sd,) = scrape["dns_sd_configs"]
    assert set(sd["names"]) == {"exporter", "exporter-gpu"} <= set(gpu_config["services"])
    container_ports = {p.split(":")[-1].split("/")[0] for n in sd["names"] for p in gpu_config["services"][n]["ports"]}
    assert container_ports == {str(sd["port"])}
    (am,) = prom["alerting"]["alertmanagers"]
    assert am["static_configs"][0]["targets"] == ["alertmanager:9093"]


def test_alertmanager_uses_the_shipped_config_and_passes_amtool(config: dict[str, Any]) -> None:
    service = config["services"]["alertmanager"]
    path = binds(service)[flag(service, "--config.file")]
    assert path == ROOT / "alerts" / "alertmanager.yml"
    result = run(tool("amtool"), "check-config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_alertmanager_webhooks_reach_the_webhook_service(config: dict[str, Any]) -> None:
    am = yaml.safe_load((ROOT / "alerts" / "alertmanager.yml").read_text())
    urls = {w["url"] for r in am["receivers"] for w in r.get("webhook_configs", [])}
    webhook = config["services"]["webhook"]
    assert webhook["network_mode"] == "service:alertmanager"
    listen = webhook["command"][webhook["command"].index("--listen") + 1]
    for url in urls:
        parts = urlsplit(url)
        assert f"{parts.hostname}:{parts.port}" == listen, url


def test_grafana_provisions_the_datasource_and_every_dashboard(config: dict[str, Any], tmp_path: Path) -> None:
    service = config["services"]["grafana"]
    mirror(service, tmp_path)
    provisioning = tmp_path / "etc" / "grafana" / "provisioning"
    datasources = [
        d for f in sorted((provisioning / "datasources").glob("*.y*ml")) for d in yaml.safe_load(f.read_text())["datasources"]
    ]
    (prom,) = [d for d in datasources if d["type"] == "prometheus"]
    url = urlsplit(prom["url"])
    assert url.hostname == "prometheus" and url.port == 9090, prom["url"]
    providers = [
        p for f in sorted((provisioning / "dashboards").glob("*.y*ml")) for p in yaml.safe_load(f.read_text())["providers"]
    ]
    seen = set()
    for provider in providers:
        folder = tmp_path / provider["options"]["path"].lstrip("/")
        assert folder.is_dir(), f"provider path {provider['options']['path']} is not mounted"
        seen |= {p.name for p in folder.glob("*.json")}
        assert folder.resolve() == DASHBOARDS_JSON.resolve()
    assert seen == {p.name for p in dashboard_sources()}
    # $__rate_interval builds on timeInterval: it must be Prometheus's scrape interval
    server = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert server["global"]["scrape_interval"] == prom["jsonData"]["timeInterval"]


def test_nothing_is_a_copy(gpu_config: dict[str, Any]) -> None:
    """Rules, Alertmanager config and dashboards come from alerts/ and dashboards/ only."""
    for name, service in gpu_config["services"].items():
        for source in binds(service).values():
            rel = source.relative_to(ROOT)
            assert rel.parts[0] in ("alerts", "dashboards", "deploy"), f"{name}: {rel}"
    deploy_files = [p.name for p in (ROOT / "deploy").rglob("*") if p.is_file()]
    assert not [n for n in deploy_files if n.endswith("_rules.yml") or n == "alertmanager.yml" or re.match(r"llm-.*\.json$", n)]


def test_the_gpu_exporter_reads_a_hosts_dcgm_exporter_when_given_one() -> None:
    """DCGM_EXPORTER_URL reaches the GPU exporter as LLM_EXPORTER_DCGM_EXPORTER_URL, which its config
    reads and ``auto`` turns into the dcgm-exporter source, here against a fake dcgm-exporter serving
    a recorded H200 row; unset, the variable is empty and means nothing."""
    from exporter.cli import build_parser
    from exporter.config import load_config
    from exporter.gpu import build_gpu_source
    from exporter.gpu.dcgm_exporter import DcgmExporterSource
    from exporter.gpu.replay import bundled_trace, parse_trace
    from tests.support.dcgm_exporter_text import GpuRow, render
    from tests.support.fake_engine import FakeEngine

    path = bundled_trace("kernels")
    reading = parse_trace(path.read_text(encoding="utf-8"), str(path))[50]
    with FakeEngine(render([GpuRow(reading)])) as fake:
        services = compose_config("gpu", env={"DCGM_EXPORTER_URL": f"http://127.0.0.1:{fake.port}"})["services"]
        exporter = services["exporter-gpu"]
        environ = {k: str(v) for k, v in exporter["environment"].items()}
        argv = _argv(exporter)
        cfg = load_config(build_parser(argv).parse_args(argv), environ=environ)
        source = build_gpu_source(cfg.gpu_source, cfg.gpu_interval, cfg.gpu_timeout, dcgm_exporter_url=cfg.dcgm_exporter_url)
        assert isinstance(source, DcgmExporterSource)
        info = [p.labels for p in source.sample().points if p.name == "llm_gpu_info"]
    assert info == [{"gpu": "0", "uuid": reading["uuid"], "name": "NVIDIA H200", "source": "dcgm-exporter"}]
    unset = compose_config("gpu")["services"]["exporter-gpu"]["environment"]
    argv = _argv(exporter)
    assert (
        load_config(build_parser(argv).parse_args(argv), environ={k: str(v) for k, v in unset.items()}).dcgm_exporter_url is None
    )
