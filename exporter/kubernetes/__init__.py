"""Kubernetes DaemonSet mode (``--kubernetes``): GPU -> pod attribution and serving-pod discovery.

Modules, one concern each (docs/kubernetes.md is the operator's guide):

| module | concern |
|---|---|
| ``settings`` | the ``--kubernetes*`` flags, environment and ``kubernetes:`` config section; the label plan |
| ``kubelet_api`` | the kubelet's PodResources ``api.proto`` and its generated stubs (``scripts/gen_podresources.sh``) |
| ``podresources`` | the gRPC ``List`` client on the kubelet's socket -> GPU allocations |
| ``cgroup`` | ``/proc/<pid>/cgroup`` -> pod UID and container ID (cgroup v1/v2, systemd/cgroupfs, containerd/CRI-O/Docker) |
| ``pods`` | the node's pod list (API server with ``fieldSelector=spec.nodeName``, or the kubelet's ``/pods``) |
| ``attribution`` | source ``kubernetes:gpu``: ``llm_gpu_pod_info``, ``llm_gpu_process_memory_used_bytes``; opt-in GPU series labels |
| ``discovery`` | source ``kubernetes:discovery``: annotated pods -> engine and process sources, added and removed while serving |

``build_kubernetes_sources`` is the one hook ``serve`` calls (the ``kubernetes`` entry of exporter/commands/registry.py).
Imports are deferred so that ``exporter.config`` can import ``settings`` cheaply.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exporter.kubernetes.settings import KubernetesConfig
    from exporter.sources import Source

log = logging.getLogger(__name__)


def build_kubernetes_sources(
    k: KubernetesConfig | None,
    sources: list[Source],
    *,
    engine_interval: float,
    engine_timeout: float,
    engine_max_series: int,
    process_interval: float,
    nvml_module: Any = None,
) -> list[Source]:
    """``sources`` with the Kubernetes ones added (and the GPU source wrapped for the opt-in labels).

    ``k``: the ``kubernetes:`` section (settings.py; None or not enabled: ``sources`` as they are).
    The engine and process settings are those a discovered pod's sources take (``--engine-interval``,
    ``--engine-timeout``, ``--engine-max-series``, ``--process-interval``).
    Extends the schema's labels first (``KubernetesConfig.apply_labels``), so the
    collector renders ``namespace``/``pod`` and the copied pod labels.
    ``nvml_module`` replaces ``pynvml`` (tests pass the fake).
    """
    if k is None or not k.enabled:
        return sources
    from exporter.kubernetes.attribution import GpuPodSource, GpuSeriesLabels, NvmlDevices
    from exporter.kubernetes.discovery import DiscoverySource
    from exporter.kubernetes.podresources import PodResourcesClient
    from exporter.kubernetes.pods import PodDirectory, PodLister, pod_list_min_age

    k.apply_labels()
    directory = None
    if k.pod_list:
        lister = PodLister(
            k.pods_url,
            k.node_name,
            token_file=k.token_file,
            ca_file=k.ca_file,
            tls_verify=k.tls_verify,
            timeout=min(3.0, 0.5 * k.discovery_interval),
            max_body_bytes=k.pods_max_bytes,
            # only the allow-listed pod labels are read (attribution copies no other)
            label_keys=frozenset(key for key, _ in k.pod_labels),
        )
        directory = PodDirectory(lister, min_age=pod_list_min_age(k.discovery_interval))
    # the PodResources call (2 s) plus, at worst, waiting for the pod list the other source fetches (3 s)
    timeout = min(8.0, 0.9 * k.interval)
    attribution = GpuPodSource(
        PodResourcesClient(k.pod_resources_socket, timeout=min(2.0, 0.5 * timeout)),
        devices=NvmlDevices(nvml_module),
        directory=directory,
        proc_root=k.proc_root,
        pod_labels=k.pod_labels,
        interval=k.interval,
        timeout=timeout,
    )
    out = list(sources)
    if k.gpu_labels:
        out = [GpuSeriesLabels(s, attribution) if getattr(s, "name", "") == "gpu" else s for s in out]
    out.append(attribution)
    if k.discovers and directory is not None:
        out.append(
            DiscoverySource(
                directory,
                engine_interval=engine_interval,
                engine_timeout=engine_timeout,
                engine_max_series=engine_max_series,
                process_sampler=k.process_sampler,
                process_interval=process_interval,
                proc_root=k.proc_root,
                interval=k.discovery_interval,
                timeout=min(10.0, 0.9 * k.discovery_interval),
            )
        )
    log.info(
        "kubernetes: GPU attribution from %s%s",
        k.pod_resources_socket,
        f", discovery every {k.discovery_interval:g}s" if k.discovers else "",
    )
    return out


__all__ = ["build_kubernetes_sources"]
