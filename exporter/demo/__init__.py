"""``llm-layer-exporter demo``: simulator + load + exporter on 127.0.0.1, with a live view.

Why this shape: it is the README's first command and must work right after
``pip install '.[tools]'`` (scripts/run.sh) on a laptop with no GPU and no inference server;
its flags are exporter/commands/demo.py's. It starts
three real things — the simulated server (a child process, so the exporter's
process sampler can watch its scheduler thread), the exporter (``python -m
exporter serve`` reading the simulator's ``/metrics`` and ``/sim/gpu``) and an
asynchronous load — then renders the exporter's own ``/metrics``, layer by
layer, and the verdict of ``/diagnosis`` once it answers.

Two modes:

* ``demo`` (no ``--scenario``): a **tour**. ``healthy`` first, then every
  scenario with a known cause for ``--tour-seconds`` each (switched live with
  ``POST /sim/scenario``), each announced with what was injected and closed by
  what the verdict concluded (primary, confidence, chain); between scenarios
  the simulator goes back to ``healthy`` until the diagnosis is quiet. A table
  of scenario -> primary named (and whether it is the expected one) ends it.
  It runs the simulator as the scenario proofs do (4 GPUs, time scale 4, a
  10 s diagnosis window) unless ``--gpus`` / ``--time-scale`` say otherwise.
* ``demo --scenario NAME``: one scenario until Ctrl-C or ``--duration``.

The view shows the values the diagnosis judged (``/diagnosis?signals=1``: the
same window, the same units) wherever it has them; latencies are p95 over the
diagnosis' recent seconds, ratios of two things read ``×1.69``, percentages are
only for 0-1 shares, and nothing reads ``-`` when a value exists. A pipe or a
log file gets plain text; the live view only draws on a terminal.

Exit status: 0 the demo ran (its time was up, the tour ended, Ctrl-C or
SIGTERM), 1 a child failed (the simulator or the exporter did not start, or
the exporter died), 2 a bad flag, 4 cannot listen on ``--listen-address``
(checked before anything starts). Every child is stopped on exit.

The rooms, one job each (each imports only those above it):

* :mod:`.plan`: the tour's scenario list, what each must name, how long it runs
* :mod:`.units`: how a value is written (shares, multiples, seconds, rates)
* :mod:`.readings`: the exporter's ``/metrics`` and ``/diagnosis``, read once per refresh
* :mod:`.rows`: the values per layer, as the diagnosis judged them where it did
* :mod:`.verdicts`: one ``/diagnosis`` answer in one line
* :mod:`.transcript`: the plain lines (progress, what a scenario injects, wrapping)
* :mod:`.summary`: what the tour concluded per scenario, and its closing table
* :mod:`.live`: the live view on a terminal (rich)
* :mod:`.stack`: the exporter child: started, waited for, stopped; the exit statuses
* :mod:`.loads`: the load against the simulator, and what its clients saw
* :mod:`.session`: the refresh loop: read, show, check the children
* :mod:`.tour`: the tour on top of the loop: switch, wait for the verdict, back to healthy
* :mod:`.main`: from the parsed flags to the exit status
"""
