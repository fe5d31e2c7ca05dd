"""Deterministic simulation tests: Raft cores (raft_sim.py), and the controller's metadata state
machine on them (controller_sim.py), partition replication (replication_sim.py) and transactions
(txn_sim.py), in one process under a seeded faulty world.

``python3 -m pytest tests/sim`` runs a small number of schedules (CI);
``ODRADEK_SIM_SCHEDULES=5000`` (or ``--sim-schedules=5000``) runs more, and
``ODRADEK_SIM_SEED=S`` (or ``--sim-seed=S``) replays exactly one seed; a failure prints that
command.
"""
