"""``llm-layer-exporter tune``: tuning guided by the diagnosed bottleneck (issue 21, docs/tune.md).

Why a package of small modules: the knob tables are data (knobs.py), the command
line rewriting is per engine (argv.py), and the decision (decide.py), the accept
rule (accept.py) and the capacity at SLO (capacity.py) are pure functions the
unit tests drive with ramp records; only launch.py, apply.py and session.py
start or talk to processes.
"""
