"""The tests' shared plumbing, one of each, also used by bench/.

* ports.py: ``free_port``, ``closed_port_url``
* waiting.py: ``wait_until(predicate, timeout, what)``, bounded, raising with the last error
* processes.py: ``Child``, a child process logging to a file, TERM then KILL
* fake_engine.py: ``FakeEngine`` (switchable /metrics), ``RawServer`` (hand-written answers)
* exposition.py: the synthetic vLLM exposition (the simulator's bucket lists)
* stack.py: simulator + exporter as subprocesses, and the scenario driver on top
* loadloop.py: the closed-loop load, the /metrics poller, the verdict reader (real engines)
* asgi.py, browser.py: an ASGI app on a thread; headless Chromium
* k8s.py: the Kubernetes fakes (PodResources gRPC server, kubelet /pods, cgroup proc root) and hostile pod lists
* tiers.py: the unit, stack and real tiers, assigned in one table; durations.py: the duration budget
* imports.py: the package's import graph from its source (function-level imports too), and its circles

Why one kit: each of these had grown two to six copies with different contracts
(a wait that returned False beside one that raised, a runner that piped stderr
beside one that logged to a file). Import the module you need, e.g.
``from tests.support.waiting import wait_until``.
"""
