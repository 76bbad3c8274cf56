"""The labelled corpus of real log excerpts, its tuning/held-out split, and the accuracy floors.

The held-out part is never used to fit signatures (issue 12 §2): the floors asserted on it are the
measured values, not the targets, wherever the measurement is below the target.
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import cache

from trainguard.detection.classify import ClassifyResult
from trainguard.detection.evaluation import (
    DEFAULT_CORPUS_DIR,
    HELDOUT,
    SPLITS,
    TUNING,
    Outcome,
    Report,
    Sample,
    evaluate_parts,
    load_corpus,
    read_samples,
    source_repo,
    split_for,
)
from trainguard.models import Attribution, Category

PUBLIC = {c.value for c in Category} - {"straggler"}
ATTRIBUTIONS = {a.value for a in Attribution}
SPLIT_FILE = DEFAULT_CORPUS_DIR / "public.jsonl"

# Targets of issue 12 for the held-out part.
TARGET_FATAL, TARGET_CATEGORY, TARGET_ATTRIBUTION = 0.97, 0.90, 0.80
# Measured on the held-out part after tuning (see docs/detection.md, "Measuring"). Below the target
# where the measurement is: the suite asserts what was measured so a regression fails, not the wish.
# These floors were set on the held-out part as it stood after round 4 (every held-out record up to
# pub352) and keep applying to exactly that set: held-out excerpts a later round adds are scored, not
# fitted, so when the detector gets some of them wrong the floors must not be loosened to absorb them.
# Round 8 raised them to what was measured (94.9 / 93.6 / 91.7 %; kind-informed, see docs/detection.md).
HELDOUT_FLOOR_FATAL, HELDOUT_FLOOR_CATEGORY, HELDOUT_FLOOR_ATTRIBUTION = 0.94, 0.93, 0.91
ROUND4_LAST_PUBLIC = 352
# The held-out part as it stood after round 6 (round 5: 92.7 / 90.9 / 88.4 % of 164; round 6: 93.7 /
# 91.4 / 89.1 % of 174, every held-out record up to pub401). Raised only to what was measured, never
# lowered; like the round-4 floors it keeps applying to exactly that set (round 8: 94.8 / 92.5 / 90.2 %).
HELDOUT_ALL_FLOOR_FATAL, HELDOUT_ALL_FLOOR_CATEGORY, HELDOUT_ALL_FLOOR_ATTRIBUTION = 0.94, 0.92, 0.90
ROUND6_LAST_PUBLIC = 401
# The held-out part as it stood after round 7 (92.3 / 89.6 / 87.98 % of 183, every held-out record up to
# pub424). Round 8 raised them to what was measured on the same 183 (95.1 / 92.9 / 90.2 %): that gain is
# kind-informed (the kinds of the held-out misses were read to choose what to generalise, see
# docs/detection.md), so it is a floor against regression, not a blind score.
HELDOUT_R7_FLOOR_FATAL, HELDOUT_R7_FLOOR_CATEGORY, HELDOUT_R7_FLOOR_ATTRIBUTION = 0.95, 0.92, 0.90
ROUND7_LAST_PUBLIC = 424
# The held-out part as it stood after round 8 (94.9 / 92.9 / 90.4 % of 198, every held-out record up to
# pub451). Raised only to what was measured, never lowered; since round 9 it keeps applying to exactly
# that set, like the floors above.
HELDOUT_R8_FLOOR_FATAL, HELDOUT_R8_FLOOR_CATEGORY, HELDOUT_R8_FLOOR_ATTRIBUTION = 0.94, 0.92, 0.90
ROUND8_LAST_PUBLIC = 451
# The whole held-out part as it stands (round 9: 94.2 / 90.6 / 88.3 % of 223). Set at what was measured:
# the 25 held-out excerpts new in round 9 are scored, not fitted, so they pull the whole part down.
# Round 10 (238 excerpts): 94.1 / 90.8 / 88.7 %, so these floors still hold on the whole part and keep
# applying to it; they also keep applying to exactly the 223 they were set on (ROUND9_LAST_PUBLIC).
# Round 11: the 22 held-out excerpts it added are scored, not fitted, and read 81.8 / 54.5 / 45.5 %, so
# the whole part (260) reads 93.1 / 87.7 / 85.4 %. As after round 5 and round 7, these floors are not
# loosened to absorb them: they keep applying to exactly the 238 excerpts of the whole part as it stood
# after round 10 (ROUND10_LAST_PUBLIC), where they hold (94.1 / 90.8 / 89.1 %), and the round-11
# excerpts have a floor of their own (below). Every held-out excerpt is under one of the two.
HELDOUT_R9_FLOOR_FATAL, HELDOUT_R9_FLOOR_CATEGORY, HELDOUT_R9_FLOOR_ATTRIBUTION = 0.94, 0.90, 0.88
ROUND9_LAST_PUBLIC = 491
# The held-out part as it stood after round 10, measured after round 11's generalisations: 94.1 / 90.8 /
# 89.1 % of 238 (one excerpt, pub363, gained its attribution through a signature generalised from a
# tuning excerpt of its kind). The attribution floor rises to what was measured; the others stay.
# Round 12 (same 238): 94.1 / 91.6 / 89.9 % (three held-out excerpts of kinds round 12 learnt from its
# tuning part read right, one reads wrong, see docs/detection.md); category floor raised to 91 %.
HELDOUT_R10_FLOOR_FATAL, HELDOUT_R10_FLOOR_CATEGORY, HELDOUT_R10_FLOOR_ATTRIBUTION = 0.94, 0.91, 0.89
ROUND10_LAST_PUBLIC = 522
# The blind measure of round 8: the held-out excerpts new in round 8 (pub425 on), split and committed
# (8e70e24, 5850022) before the classifier was run on them, never used to choose or fit a signature (14 of
# 15 right on all three counts, 93.3 %). Small, so it is a tripwire rather than a precise rate.
ROUND8_FIRST_PUBLIC = 425
HELDOUT_R8_NEW_FLOOR = 0.93
# The blind measure of round 9: the held-out excerpts new in round 9 (pub452 on), from sources the corpus
# had not used, split and committed (7333810) before the classifier was run on them. Measured before any
# catalog change and after (the round's generalisations come from its tuning misses only and did not move
# it): 88.0 / 72.0 / 72.0 % of 25. The floor is that measure.
ROUND9_FIRST_PUBLIC = 452
# Round 12: two of the 25 (pyxis step-start refusals, pub452 and pub454) read right through the container
# signature generalised from round 12's tuning misses: 88.0 / 80.0 / 80.0 %; the floor rises to it.
HELDOUT_R9_NEW_FLOOR_FATAL, HELDOUT_R9_NEW_FLOOR_CATEGORY, HELDOUT_R9_NEW_FLOOR_ATTRIBUTION = 0.88, 0.80, 0.80
# The blind measure of round 10: the held-out excerpts new in round 10 (pub492 on), split and committed
# (cf393b7) before the classifier was run on them. Measured with the round-9 catalog: 86.7 / 86.7 / 86.7 %
# of 15 (13 right), no healthy one called fatal. After the round's generalisations, which came from its
# tuning misses only, 93.3 % on all three counts: one of the 15 (a raylet OOM summary) now reads right
# through the Ray memory-monitor signature generalised from a tuning excerpt of the same kind. The floor is
# the measure after; the blind figure is the one before (docs/detection.md).
ROUND10_FIRST_PUBLIC = 492
HELDOUT_R10_NEW_FLOOR = 0.93
# The measure of round 11: the held-out excerpts new in round 11 (pub523 on), found by the kinds the
# held-out part misses (kind-informed, like round 8's, see docs/detection.md), split and committed
# (e95905b) before the classifier was run on them. Blind, with the round-10 catalog: 81.8 / 54.5 / 40.9 %
# of 22, no healthy one called fatal. After the round's generalisations, which came from its tuning misses
# only: 81.8 / 54.5 / 45.5 % (one excerpt of a kind also missed on the tuning side, an expired job
# credential, gained its attribution). The floor is the measure after.
# Round 12: 86.4 / 86.4 / 77.3 % of the same 22, after round 12's generalisations (from its tuning misses:
# the container stack refusing a step, NCCL's own CUDA failures); the floor rises to it.
ROUND11_FIRST_PUBLIC = 523
ROUND11_LAST_PUBLIC = 554
HELDOUT_R11_NEW_FLOOR_FATAL = 0.86
HELDOUT_R11_NEW_FLOOR_CATEGORY, HELDOUT_R11_NEW_FLOOR_ATTRIBUTION = 0.86, 0.77
# The part as it stood after round 11 (260 excerpts), measured after round 12: 93.5 / 91.2 / 88.8 %. Its
# fatal-vs-healthy share is below the round-9 floor (94 %), which keeps applying to the 238 of round 10; these
# floors are what holds on the 260.
# Raised after the fourteen passes of messages from their sources (2026-12-01, night): 95.8 / 91.9 / 89.6 %.
HELDOUT_R11_FLOOR_FATAL, HELDOUT_R11_FLOOR_CATEGORY, HELDOUT_R11_FLOOR_ATTRIBUTION = 0.95, 0.91, 0.89
# The measure of round 12: the held-out excerpts new in round 12 (pub555 on), split and committed (b3285f4)
# before the classifier was run on them; pub557 was then dropped as a cross-post of pub452's report
# (b19a13a). Blind, with the round-11 catalog: 83.3 / 75.0 / 75.0 % of 12 (84.6 / 69.2 / 69.2 % of the 13
# as committed), one healthy excerpt called fatal (pub564, below). After the round's generalisations, which
# came from its tuning misses only: 91.7 / 83.3 / 83.3 %. The floor is the measure after.
# Round 13: 91.7 % on all three counts (pub574, an EFA provider's abort, reads right through the entry
# generalised from round 13's tuning miss of the same kind, pub582); category and attribution floors raised.
ROUND12_FIRST_PUBLIC = 555
ROUND12_LAST_PUBLIC = 579
HELDOUT_R12_NEW_FLOOR_FATAL = 0.91
HELDOUT_R12_NEW_FLOOR_CATEGORY, HELDOUT_R12_NEW_FLOOR_ATTRIBUTION = 0.91, 0.91
# The part as it stood after round 12 (272 excerpts), measured after round 13: 93.4 / 91.2 / 88.97 %.
# Raised after the fourteen passes of messages from their sources: 95.6 / 91.9 / 89.7 %.
HELDOUT_R12_FLOOR_FATAL, HELDOUT_R12_FLOOR_CATEGORY, HELDOUT_R12_FLOOR_ATTRIBUTION = 0.95, 0.91, 0.89
# The measure of round 13: the held-out excerpts new in round 13 (pub580 on), found by the kinds the
# held-out part reads as healthy (kind-informed, like rounds 8 and 11), split and committed (8c242a9)
# before the classifier was run on them. Blind, with the round-12 code: 46.7 / 46.7 / 40.0 % of 15, one
# healthy excerpt called fatal (pub596). After the round's generalisations, which came from its tuning
# misses only: 80.0 / 80.0 / 66.7 %, none called fatal. The floor is the measure after.
ROUND13_FIRST_PUBLIC = 580
ROUND13_LAST_PUBLIC = 610
# Raised to the measure after the messages from their sources: 93.3 / 93.3 / 80.0 % (two of the gain,
# pub605 and pub606, are not independent: docs/detection.md, "Scores"; a floor against regression, not a
# blind score).
HELDOUT_R13_NEW_FLOOR_FATAL = 0.93
HELDOUT_R13_NEW_FLOOR_CATEGORY, HELDOUT_R13_NEW_FLOOR_ATTRIBUTION = 0.93, 0.80
# The part as it stood after round 13 (287 excerpts), measured after rounds 14 and 15: 92.7 / 90.6 / 87.8 %
# (neither round's generalisations changed its verdicts).
# Raised after Slurm's messages from its source (docs/detection.md): 93.7 / 90.9 / 88.2 %.
# Raised again after the six passes of messages from their printers' sources: 95.1 / 91.6 / 88.9 %.
HELDOUT_R13_FLOOR_FATAL, HELDOUT_R13_FLOOR_CATEGORY, HELDOUT_R13_FLOOR_ATTRIBUTION = 0.95, 0.91, 0.88
# The measure of round 14: the held-out excerpts new in round 14 (pub611-pub638), a random draw (not chosen by
# the held-out part's kinds), split and committed (80897e5) before the classifier was run on them. Blind, with
# the round-13 code: 81.25 % on all three counts of 16, no healthy excerpt called fatal. The round's
# generalisations, from its tuning misses only, changed none of them: the floor is the blind measure.
ROUND14_FIRST_PUBLIC = 611
ROUND14_LAST_PUBLIC = 649
# Raised after the messages from their printers' sources: 87.5 % on all three.
HELDOUT_R14_NEW_FLOOR_FATAL = 0.87
HELDOUT_R14_NEW_FLOOR_CATEGORY, HELDOUT_R14_NEW_FLOOR_ATTRIBUTION = 0.87, 0.87
# The measure of round 15 (done beside round 14, from the round-13 code): the held-out excerpts new in round
# 15 (pub650 on), found by the kinds the held-out part reads worst (interconnect, slurm_node_failure,
# python_exception, segfault: kind-informed, like rounds 8, 11 and 13), split and committed (1e7176c) before
# the classifier was run on them. Blind, with the round-13 code: 66.7 / 58.3 / 58.3 % of 12, no healthy
# excerpt called fatal. After the round's generalisations, which came from its tuning misses only: 75.0 /
# 66.7 / 66.7 %. The floor is the measure after.
ROUND15_FIRST_PUBLIC = 650
ROUND15_LAST_PUBLIC = 699
# Raised after the messages from their printers' sources: 83.3 / 83.3 / 66.7 %.
HELDOUT_R15_NEW_FLOOR_FATAL = 0.83
HELDOUT_R15_NEW_FLOOR_CATEGORY, HELDOUT_R15_NEW_FLOOR_ATTRIBUTION = 0.83, 0.66
# The whole held-out part as it stood after rounds 14 and 15 (315 excerpts, up to pub699): 91.4 / 89.2 /
# 86.7 % with the merged code. Its own floors, so the excerpts round 16 adds cannot hide a fall in it.
# Raised after Slurm's messages from its source: 92.4 / 89.5 / 87.0 %.
# Raised again after the six passes of messages from their printers' sources: 94.3 / 91.1 / 87.9 %.
# Raised again after the fourteen passes: 94.6 / 91.4 / 88.3 %.
HELDOUT_R15_FLOOR_FATAL, HELDOUT_R15_FLOOR_CATEGORY, HELDOUT_R15_FLOOR_ATTRIBUTION = 0.94, 0.91, 0.88
# The measure of round 16: the held-out excerpts new in round 16 (pub700-pub749), a random draw over
# ML-framework trackers (not chosen by the held-out part's kinds), split and committed (3a812de) before the
# classifier was run on them. Blind, with the code of rounds 14 and 15: 100 / 93.8 / 93.8 % of 16, no
# healthy excerpt called fatal. The round's generalisation, from its tuning misses only, changed none of
# them: the floor is the blind measure.
ROUND16_FIRST_PUBLIC = 700
ROUND16_LAST_PUBLIC = 749
HELDOUT_R16_NEW_FLOOR_FATAL = 1.00
HELDOUT_R16_NEW_FLOOR_CATEGORY, HELDOUT_R16_NEW_FLOOR_ATTRIBUTION = 0.93, 0.93
# The measure of round 17 (done beside round 16, from the round-15 code): the held-out excerpts new in round
# 17 (pub750-pub799), a random draw from the HPC side of distributed training (Slurm tooling, pyxis/enroot,
# MPI, Horovod, JAX/XLA, DCGM, Kubeflow; not chosen by the held-out part's kinds), split and committed
# (ee9b430) before the classifier was run on them. Blind, with the round-15 code: 57.1 / 57.1 / 50.0 % of
# 14, one healthy excerpt called fatal (pub768, below). After the round's generalisations, which came from
# its tuning misses only: 64.3 / 64.3 / 57.1 % (pub759 reads right through the XLA coordination-service
# entry learnt from the tuning miss pub758). The floor is the measure after.
ROUND17_FIRST_PUBLIC = 750
ROUND17_LAST_PUBLIC = 799
# Raised after the messages from their printers' sources: 78.6 / 71.4 / 64.3 %.
# Raised after the passes of the night (Slurm daemons' messages read pub764, which is not independent: its
# message was quoted in docs/detection.md before that pass): 85.7 / 78.6 / 71.4 %, a floor against regression.
HELDOUT_R17_NEW_FLOOR_FATAL = 0.85
HELDOUT_R17_NEW_FLOOR_CATEGORY, HELDOUT_R17_NEW_FLOOR_ATTRIBUTION = 0.78, 0.71
# The whole held-out part as it stood after round 17 (345 excerpts, up to pub799), with the fourteen passes of
# messages from their sources: 94.5 / 91.0 / 87.8 %. Its own floors, so round 18's excerpts cannot hide a
# fall.
HELDOUT_R17_FLOOR_FATAL, HELDOUT_R17_FLOOR_CATEGORY, HELDOUT_R17_FLOOR_ATTRIBUTION = 0.94, 0.91, 0.87
# The measure of round 18: the held-out excerpts new in round 18 (pub800-pub849), a random draw across
# ML-framework, NCCL, cloud-HPC, Slurm-site and JAX/TF trackers (not chosen by any kind), split and committed
# (dd63c9b) before the classifier was run on them. Blind, with the code of that time: 88.9 / 83.3 / 77.8 % of
# 18, no healthy excerpt called fatal; the passes merged after it and the round's generalisations (from its
# tuning misses only) changed none of them: the floor is the blind measure.
ROUND18_FIRST_PUBLIC = 800
ROUND18_LAST_PUBLIC = 849
HELDOUT_R18_NEW_FLOOR_FATAL = 0.88
HELDOUT_R18_NEW_FLOOR_CATEGORY, HELDOUT_R18_NEW_FLOOR_ATTRIBUTION = 0.83, 0.77
# The whole held-out part as it stood after round 18 (363 excerpts, up to pub849): 94.2 / 90.6 / 87.3 %.
HELDOUT_R18_FLOOR_FATAL, HELDOUT_R18_FLOOR_CATEGORY, HELDOUT_R18_FLOOR_ATTRIBUTION = 0.94, 0.90, 0.87
# The measure of round 19: two random draws done side by side from the same code (7f0eebc), split and
# committed (0a16640, df0a1dd) before the classifier was run on them; the round's generalisations came from
# its tuning misses only and changed none of the held-out verdicts, so the floors are the blind measures. 19a,
# the HPC side (pub850-pub879): 75.0 / 68.8 / 68.8 % of 16; 19b, large-model training frameworks
# (pub880-pub909): 66.7 % on all three of 6; none healthy called fatal.
ROUND19A_FIRST_PUBLIC, ROUND19A_LAST_PUBLIC = 850, 879
ROUND19B_FIRST_PUBLIC, ROUND19B_LAST_PUBLIC = 880, 909
HELDOUT_R19A_NEW_FLOOR_FATAL = 0.75
HELDOUT_R19A_NEW_FLOOR_CATEGORY, HELDOUT_R19A_NEW_FLOOR_ATTRIBUTION = 0.68, 0.68
HELDOUT_R19B_NEW_FLOOR = 0.66
# The measure of round 20a: a random draw from the HPC side (UCX / Open MPI / MPICH / libfabric trackers,
# pyxis / enroot / Apptainer, AWS ParallelCluster, a Lustre burst buffer, Slurm job-tool trackers;
# pub910-pub936), split and committed (79f73bc) before the classifier was run on them, with the code of
# main 569eae1. Blind: 88.2 / 88.2 / 70.6 % of 17 held-out excerpts (15, 15 and 12 right), none healthy
# called fatal; the round's generalisations came from its tuning misses only and changed none of the held-out
# verdicts, so the floors are the blind measures rounded down.
ROUND20A_FIRST_PUBLIC, ROUND20A_LAST_PUBLIC = 910, 939
HELDOUT_R20A_NEW_FLOOR_FATAL = 0.88
HELDOUT_R20A_NEW_FLOOR_CATEGORY, HELDOUT_R20A_NEW_FLOOR_ATTRIBUTION = 0.88, 0.70
# The measure of round 20b: a random draw from training frameworks' trackers (PyTorch distributed/elastic,
# torchtitan, DeepSpeed, Megatron-Bridge, NeMo Automodel, llm-foundry, transformers, accelerate, JAX,
# JAX-Toolbox, gpt-neox; pub940-pub969, 16 used), split and committed (5d76af4) before the classifier was run
# on them. Blind, with the code of that time (main 569eae1): 83.3 / 66.7 / 66.7 % of 6 held-out excerpts, none
# healthy called fatal; the round made no generalisation, so the floors are the blind measure.
ROUND20B_FIRST_PUBLIC, ROUND20B_LAST_PUBLIC = 940, 969
HELDOUT_R20B_NEW_FLOOR_FATAL = 0.83
HELDOUT_R20B_NEW_FLOOR_CATEGORY, HELDOUT_R20B_NEW_FLOOR_ATTRIBUTION = 0.66, 0.66
# The measure of round 21a: a random draw from the cluster/operations side of GPU training (Kubernetes GPU
# stack, mpi-operator and the training operator, Ray Train, SkyPilot, Determined, nccl-tests, Horovod,
# Flux, Cluster Toolkit, DeepOps; pub970-pub998), split and committed (5315ae6) before the classifier was
# run on them, with the code of main b81e3f4. Blind: 87.5 / 87.5 / 75.0 % of 16 held-out excerpts (14, 14
# and 12 right), none healthy called fatal; the round's generalisations came from its tuning misses only,
# so the floors are the blind measure rounded down.
ROUND21A_FIRST_PUBLIC, ROUND21A_LAST_PUBLIC = 970, 999
HELDOUT_R21A_NEW_FLOOR_FATAL = 0.87
HELDOUT_R21A_NEW_FLOOR_CATEGORY, HELDOUT_R21A_NEW_FLOOR_ATTRIBUTION = 0.87, 0.75
# The measure of round 21b: a random draw from training frameworks' and libraries' trackers
# (pytorch-lightning, ColossalAI, axolotl, unsloth, TRL, TransformerEngine, apex, OpenRLHF, LlamaFactory,
# ms-swift, lm-evaluation-harness, MaxText, fairscale; pub1000-pub1029, 27 used), split and committed
# (c7b6e6f) before the classifier was run on them, with the code of main b81e3f4. Blind: 89.5 / 78.9 /
# 78.9 % of 19 held-out excerpts (17, 15 and 15 right), none healthy called fatal; the floors are the blind
# measure rounded down.
ROUND21B_FIRST_PUBLIC, ROUND21B_LAST_PUBLIC = 1000, 1029
HELDOUT_R21B_NEW_FLOOR_FATAL = 0.89
HELDOUT_R21B_NEW_FLOOR_CATEGORY, HELDOUT_R21B_NEW_FLOOR_ATTRIBUTION = 0.78, 0.78
# The measure of round 22: a kind-chosen draw of healthy look-alikes (warnings, loss-scale skipped
# steps, exit-time and deprecation notices, straggler and checkpoint warnings from runs that went on) with
# three real failures shown beside them (pub1030-pub1059, 27 used), split and committed (f9f8ee5) before the
# classifier was run on them, with the code of merge21 54a694a. Blind: 100.0 / 100.0 / 100.0 % of 15
# held-out excerpts (all 15 healthy), none healthy called fatal; the floors are the blind measure.
ROUND22_FIRST_PUBLIC, ROUND22_LAST_PUBLIC = 1030, 1059
HELDOUT_R22_NEW_FLOOR_FATAL = 1.00
HELDOUT_R22_NEW_FLOOR_CATEGORY, HELDOUT_R22_NEW_FLOOR_ATTRIBUTION = 1.00, 1.00
# The measure of round 23: a random draw from sources other than GitHub issue trackers (NVIDIA developer
# forums, Bitbucket and GitLab trackers, a GitLab-mirrored ports commit, pastebin, gists, Hugging Face Space
# discussions; pub1060-pub1089, 21 used), split and committed (9591c51) before the classifier was run on
# them, with the code of main bdb0e6a. Blind: 83.3 / 50.0 / 50.0 % of 12 held-out excerpts (10, 6 and 6
# right), none of them healthy and none healthy called fatal; the floors are the blind measure rounded down.
ROUND23_FIRST_PUBLIC, ROUND23_LAST_PUBLIC = 1060, 1089
HELDOUT_R23_NEW_FLOOR_FATAL = 0.83
HELDOUT_R23_NEW_FLOOR_CATEGORY, HELDOUT_R23_NEW_FLOOR_ATTRIBUTION = 0.50, 0.50
# The measure of round 24: a kind-chosen draw toward the weakest held-out category, Slurm-side failures
# (task launch and credential refusals, a controller that does not answer, step cgroup set-up, job
# memory-limit kills, execve failures), with Slurm-side healthy look-alikes (srun/slurmstepd warnings and
# notices of jobs that ran; pub1090-pub1119, 24 used), split and committed (fe58e46) before the classifier
# was run on them, with the code of main 66cfe98. Blind: 94.1 / 94.1 / 88.2 % of 17 held-out excerpts (16,
# 16 and 15 right; 6 of them healthy), none healthy called fatal; the round's generalisations came from its
# tuning misses only and moved no held-out verdict, so the floors are the blind measure rounded down.
ROUND24_FIRST_PUBLIC, ROUND24_LAST_PUBLIC = 1090, 1119
HELDOUT_R24_NEW_FLOOR_FATAL = 0.94
HELDOUT_R24_NEW_FLOOR_CATEGORY, HELDOUT_R24_NEW_FLOOR_ATTRIBUTION = 0.94, 0.88
# The measure of round 25: a kind-chosen draw of logs where an error, warning or traceback is printed and the
# job goes on (a logger's network and upload errors, a logger thread's traceback, DataLoader finalizer
# exceptions, an NFS silly-rename cleanup error) beside real failures whose error is followed by more output
# but the job died (elastic runs that did not survive a lost peer, an OOM retry at a smaller batch that still
# ran out, a bus error followed by wandb's exit summary, a training thread's traceback, a cleanup error raised
# in the training loop; pub1120-pub1149, 14 used), split and committed (901a5d8) before the classifier was run
# on them, with the code of main 66cfe98. Blind: 75.0 / 66.7 / 66.7 % of 12 held-out excerpts (9, 8 and 8
# right; 5 healthy, 7 fatal), one healthy excerpt called fatal (pub1124, below); the floors are the blind
# measure rounded down. The "ran on" rule built beside this round (branch ranon) did not see it: this is its
# out-of-sample part.
ROUND25_FIRST_PUBLIC, ROUND25_LAST_PUBLIC = 1120, 1149
HELDOUT_R25_NEW_FLOOR_FATAL = 0.75
HELDOUT_R25_NEW_FLOOR_CATEGORY, HELDOUT_R25_NEW_FLOOR_ATTRIBUTION = 0.66, 0.66
# The measure of round 26a: a random draw from ML-framework trackers (PyTorch, Lightning, transformers,
# accelerate, diffusers, DeepSpeed's launcher, Megatron-Bridge, NeMo on Neuron, torch_xla, JAX/Flax,
# ColossalAI and projects training with them; pub1150-pub1179, 20 used: 8 healthy look-alikes, 12 failures),
# split and committed (49ea9b9) before the classifier was run on them, with the code of main 88aa995. Blind:
# 90.0 / 90.0 / 90.0 % of 10 held-out excerpts (9, 9 and 9 right; 6 healthy, all read healthy), none healthy
# called fatal; no catalog change in the round (a measure only), so the floors are the blind measure rounded
# down.
ROUND26A_FIRST_PUBLIC, ROUND26A_LAST_PUBLIC = 1150, 1179
HELDOUT_R26A_NEW_FLOOR_FATAL = 0.90
HELDOUT_R26A_NEW_FLOOR_CATEGORY, HELDOUT_R26A_NEW_FLOOR_ATTRIBUTION = 0.90, 0.90
# The measure of round 26b: a random draw from the HPC side of distributed GPU training (nccl-tests, UCX,
# Open MPI, PRRTE, MPICH, Horovod, the Kubeflow trainer, the GPU Operator, InstaSlice, submitit and other
# Slurm-using tools; pub1180-pub1209, 22 used), taken as the searches returned them, about two fifths
# healthy look-alikes, split and committed (b26ff8c) before the classifier was run on them, with the code of
# main 88aa995. Blind: 57.1 / 57.1 / 50.0 % of 14 held-out excerpts (8, 8 and 7 right; 6 healthy, 8 fatal),
# one healthy excerpt called fatal (pub1187, listed above). The round changes no signature (a measure only),
# so the floors are the blind measure rounded down.
ROUND26B_FIRST_PUBLIC, ROUND26B_LAST_PUBLIC = 1180, 1209
HELDOUT_R26B_NEW_FLOOR_FATAL = 0.57
HELDOUT_R26B_NEW_FLOOR_CATEGORY, HELDOUT_R26B_NEW_FLOOR_ATTRIBUTION = 0.57, 0.50
# Held-out healthy excerpts the detector calls fatal, with no tuning example of their kind to learn
# from (fixing them from the held-out line itself would spoil the measure). Each is a known false
# positive the lead must see; `test_known_heldout_false_positives_are_still_wrong` fails once one is
# fixed, so this list can only shrink. Round 6 emptied it: pub371 (an aws-ofi-nccl init failure with the
# job training on over sockets) reads healthy since the plugin-fallback kind was learnt from a tuning
# excerpt of it (pub373). Round 12 adds pub564 (YOLO-World#440): a bare `OSError: [Errno 16] Device or
# resource busy: '.nfs...'` line from a run that goes on is read as the program's exception; it was called
# fatal blind and no tuning excerpt shows the kind (an exception line the program survives, with no
# traceback), so it is listed rather than fitted. Round 13 learnt, from its tuning excerpts, the tracebacks
# CPython prints and survives (a thread's, multiprocessing's exit-time finalizers'): pub564's line has no
# traceback around it and still reads fatal, so it stays listed. Round 17 adds pub768 (horovod#2652):
# elastic Horovod logs Gloo's `Connection reset by peer` from its background loop after a worker was removed
# on purpose and trains on with the others; it was called fatal blind and no tuning excerpt shows the kind (an
# elastic run surviving a peer's loss), so it is listed rather than fitted. Round 25 adds pub1124
# (gram-ai/capsule-networks#5): multiprocessing's exit finalizers cannot remove a directory holding a busy
# NFS silly-rename file, and the paste starts with the bare `OSError: [Errno 16] Device or resource busy:
# '.nfs...'` line before the finalizer frames; the reporter says the loss keeps decreasing. Called fatal
# blind, the kind of pub564; no tuning excerpt of round 25 shows it, so it is listed rather than fitted.
# Round 26b adds pub1187 (open-mpi/ompi#6134): on Open MPI's ARMv8 CI, UCX cannot create a completion
# queue and the UCX PML prints `Failed to create UCP worker`, yet the tests pass because Open MPI falls
# back to another PML (a maintainer says so in the thread). Called fatal blind; no tuning excerpt shows a
# UCP worker failure the job survives, and round 26b changes no signature, so it is listed, not fitted.
KNOWN_HELDOUT_HEALTHY_CALLED_FATAL: frozenset[str] = frozenset({"pub564", "pub768", "pub1124", "pub1187"})


def test_own_corpus_is_large_sourced_and_labelled() -> None:
    own = [s for p in sorted(DEFAULT_CORPUS_DIR.glob("*.jsonl")) for s in read_samples(p)]
    assert len(own) >= 1143
    assert len({s.id for s in own}) == len(own)
    for s in own:
        assert s.source.startswith("https://"), s.id
        assert s.category in PUBLIC and s.attribution in ATTRIBUTIONS, s.id
        assert s.fatal == (s.category != "healthy"), s.id
        assert (s.attribution == "none") == (s.category == "healthy"), s.id
        assert s.log.strip(), s.id
    assert sum(1 for s in own if not s.fatal) >= 259
    assert len({s.category for s in own}) >= 14
    assert len({s.repo for s in own}) >= 553


def test_new_records_carry_repo_split_and_rationale() -> None:
    for raw in SPLIT_FILE.read_text(encoding="utf-8").splitlines():
        doc = json.loads(raw)
        assert doc["split"] in SPLITS and doc["repo"] == source_repo(doc["source"]), doc["id"]
        assert doc["why"].strip() and isinstance(doc["nodes"], list), doc["id"]


def test_split_is_by_source_and_follows_the_stored_rule() -> None:
    corpus = load_corpus()
    tuned_before = frozenset(s.repo for s in corpus if s.origin != SPLIT_FILE.name)
    sides: dict[str, set[str]] = defaultdict(set)
    for s in corpus:
        sides[s.repo].add(s.split)
        if s.origin == SPLIT_FILE.name:
            # The stored split is what the documented rule gives: it cannot drift or be hand-moved.
            assert s.split == split_for(s.repo, tuned_before), s.id
        else:
            assert s.split == TUNING, s.id  # predates the split: the signatures were fitted to it
    assert all(len(v) == 1 for v in sides.values()), [r for r, v in sides.items() if len(v) > 1]
    heldout = sum(1 for s in corpus if s.split == HELDOUT)
    assert heldout >= 180 and heldout / len(corpus) >= 0.3


def test_split_rule_is_deterministic_and_case_insensitive() -> None:
    assert source_repo("https://github.com/NVIDIA/nccl/issues/472") == "nvidia/nccl"
    assert (
        source_repo("github.com/bigscience-workshop/bigscience/blob/x/y.md")
        == "bigscience-workshop/bigscience"
    )
    assert source_repo("https://github.com/microsoft/DeepSpeed/issues/1") == "deepspeedai/deepspeed"
    # one project under its old and new owner is one split unit (else a thread could land on the other side)
    for old, new in [
        ("google/maxtext", "AI-Hypercomputer/maxtext"),
        ("pytorch/torchtune", "meta-pytorch/torchtune"),
        ("volcengine/verl", "verl-project/verl"),
    ]:
        assert source_repo(f"https://github.com/{old}/issues/1") == source_repo(
            f"https://github.com/{new}/issues/2"
        )
    assert source_repo("https://forums.developer.nvidia.com/t/some-thread/123?page=2") == (
        "forums.developer.nvidia.com/t/some-thread/123"
    )
    assert split_for("nvidia/nccl", frozenset({"nvidia/nccl"})) == TUNING
    picks = {split_for(f"owner/repo{i}") for i in range(200)}
    assert picks == {TUNING, HELDOUT}
    assert [split_for(f"owner/repo{i}") for i in range(50)] == [
        split_for(f"owner/repo{i}") for i in range(50)
    ]


@cache
def _parts() -> dict[str, Report]:
    """Classify the corpus once for the tests that read the scores (each part on its own)."""
    return evaluate_parts(load_corpus())


def test_tuning_part_meets_the_targets() -> None:
    report = _parts()[TUNING]
    assert report.healthy_classified_fatal == []
    assert report.fatal_accuracy >= TARGET_FATAL
    assert report.category_accuracy >= TARGET_CATEGORY
    assert report.attribution_accuracy >= TARGET_ATTRIBUTION


def _heldout_up_to(report: Report, last_public: int) -> Report:
    """The held-out records a round's floors were measured on: every record up to pubN (and none later)."""

    def measured(sample_id: str) -> bool:
        return not sample_id.startswith("pub") or int(sample_id[3:]) <= last_public

    return Report([o for o in report.outcomes if measured(o.sample.id)])


def _round4_heldout(report: Report) -> Report:
    return _heldout_up_to(report, ROUND4_LAST_PUBLIC)


def test_heldout_part_holds_its_floor() -> None:
    report = _round4_heldout(_parts()[HELDOUT])
    assert report.total >= 150
    assert report.healthy_classified_fatal == []
    assert report.fatal_accuracy >= HELDOUT_FLOOR_FATAL
    assert report.category_accuracy >= HELDOUT_FLOOR_CATEGORY
    assert report.attribution_accuracy >= HELDOUT_FLOOR_ATTRIBUTION


def test_round6_heldout_part_holds_its_floor() -> None:
    report = _heldout_up_to(_parts()[HELDOUT], ROUND6_LAST_PUBLIC)
    assert report.total >= 170
    assert report.fatal_accuracy >= HELDOUT_ALL_FLOOR_FATAL
    assert report.category_accuracy >= HELDOUT_ALL_FLOOR_CATEGORY
    assert report.attribution_accuracy >= HELDOUT_ALL_FLOOR_ATTRIBUTION


def test_round7_heldout_part_holds_its_floor() -> None:
    report = _heldout_up_to(_parts()[HELDOUT], ROUND7_LAST_PUBLIC)
    assert report.total >= 183
    assert report.fatal_accuracy >= HELDOUT_R7_FLOOR_FATAL
    assert report.category_accuracy >= HELDOUT_R7_FLOOR_CATEGORY
    assert report.attribution_accuracy >= HELDOUT_R7_FLOOR_ATTRIBUTION


def test_round8_heldout_part_holds_its_floor() -> None:
    report = _heldout_up_to(_parts()[HELDOUT], ROUND8_LAST_PUBLIC)
    assert report.total >= 198
    assert report.fatal_accuracy >= HELDOUT_R8_FLOOR_FATAL
    assert report.category_accuracy >= HELDOUT_R8_FLOOR_CATEGORY
    assert report.attribution_accuracy >= HELDOUT_R8_FLOOR_ATTRIBUTION


def test_whole_heldout_part_holds_its_floor() -> None:
    whole = _parts()[HELDOUT]
    assert whole.total >= 523
    called_fatal = {o.sample.id for o in whole.healthy_classified_fatal}
    unexpected = called_fatal - KNOWN_HELDOUT_HEALTHY_CALLED_FATAL
    assert not unexpected, unexpected
    # The part as it stood after round 10; the excerpts added since have their own floors below.
    report = _heldout_up_to(whole, ROUND10_LAST_PUBLIC)
    assert report.total >= 238
    assert report.fatal_accuracy >= HELDOUT_R9_FLOOR_FATAL
    assert report.category_accuracy >= HELDOUT_R9_FLOOR_CATEGORY
    assert report.attribution_accuracy >= HELDOUT_R9_FLOOR_ATTRIBUTION
    assert report.fatal_accuracy >= HELDOUT_R10_FLOOR_FATAL
    assert report.category_accuracy >= HELDOUT_R10_FLOOR_CATEGORY
    assert report.attribution_accuracy >= HELDOUT_R10_FLOOR_ATTRIBUTION
    # The part as it stood after round 11.
    r11 = _heldout_up_to(whole, ROUND11_LAST_PUBLIC)
    assert r11.total >= 260
    assert r11.fatal_accuracy >= HELDOUT_R11_FLOOR_FATAL
    assert r11.category_accuracy >= HELDOUT_R11_FLOOR_CATEGORY
    assert r11.attribution_accuracy >= HELDOUT_R11_FLOOR_ATTRIBUTION
    # The part as it stood after round 12.
    r12 = _heldout_up_to(whole, ROUND12_LAST_PUBLIC)
    assert r12.total >= 272
    assert r12.fatal_accuracy >= HELDOUT_R12_FLOOR_FATAL
    assert r12.category_accuracy >= HELDOUT_R12_FLOOR_CATEGORY
    assert r12.attribution_accuracy >= HELDOUT_R12_FLOOR_ATTRIBUTION
    # The part as it stood after round 13.
    r13 = _heldout_up_to(whole, ROUND13_LAST_PUBLIC)
    assert r13.total >= 287
    assert r13.fatal_accuracy >= HELDOUT_R13_FLOOR_FATAL
    assert r13.category_accuracy >= HELDOUT_R13_FLOOR_CATEGORY
    assert r13.attribution_accuracy >= HELDOUT_R13_FLOOR_ATTRIBUTION
    # The part as it stood after rounds 14 and 15.
    r15 = _heldout_up_to(whole, ROUND15_LAST_PUBLIC)
    assert r15.total >= 315
    assert r15.fatal_accuracy >= HELDOUT_R15_FLOOR_FATAL
    assert r15.category_accuracy >= HELDOUT_R15_FLOOR_CATEGORY
    assert r15.attribution_accuracy >= HELDOUT_R15_FLOOR_ATTRIBUTION
    # The part as it stood after rounds 16 and 17.
    r17 = _heldout_up_to(whole, ROUND17_LAST_PUBLIC)
    assert r17.total >= 345
    assert r17.fatal_accuracy >= HELDOUT_R17_FLOOR_FATAL
    assert r17.category_accuracy >= HELDOUT_R17_FLOOR_CATEGORY
    assert r17.attribution_accuracy >= HELDOUT_R17_FLOOR_ATTRIBUTION
    # The part as it stood after round 18.
    r18 = _heldout_up_to(whole, ROUND18_LAST_PUBLIC)
    assert r18.total >= 363
    assert r18.fatal_accuracy >= HELDOUT_R18_FLOOR_FATAL
    assert r18.category_accuracy >= HELDOUT_R18_FLOOR_CATEGORY
    assert r18.attribution_accuracy >= HELDOUT_R18_FLOOR_ATTRIBUTION


def _heldout_between(first_public: int, last_public: int) -> Report:
    """The held-out records one round added: pub<first> to pub<last>."""
    return Report(
        [
            o
            for o in _parts()[HELDOUT].outcomes
            if o.sample.id.startswith("pub") and first_public <= int(o.sample.id[3:]) <= last_public
        ]
    )


def test_round8_new_heldout_excerpts_hold_their_blind_floor() -> None:
    new = _heldout_between(ROUND8_FIRST_PUBLIC, ROUND8_LAST_PUBLIC)
    assert new.total >= 15
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R8_NEW_FLOOR
    assert new.category_accuracy >= HELDOUT_R8_NEW_FLOOR
    assert new.attribution_accuracy >= HELDOUT_R8_NEW_FLOOR


def test_round9_heldout_part_holds_its_floor() -> None:
    report = _heldout_up_to(_parts()[HELDOUT], ROUND9_LAST_PUBLIC)
    assert report.total >= 223
    assert report.fatal_accuracy >= HELDOUT_R9_FLOOR_FATAL
    assert report.category_accuracy >= HELDOUT_R9_FLOOR_CATEGORY
    assert report.attribution_accuracy >= HELDOUT_R9_FLOOR_ATTRIBUTION


def test_round9_new_heldout_excerpts_hold_their_blind_floor() -> None:
    new = _heldout_between(ROUND9_FIRST_PUBLIC, ROUND9_LAST_PUBLIC)
    assert new.total >= 25
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R9_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R9_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R9_NEW_FLOOR_ATTRIBUTION


def test_round10_new_heldout_excerpts_hold_their_floor() -> None:
    new = _heldout_between(ROUND10_FIRST_PUBLIC, ROUND10_LAST_PUBLIC)
    assert new.total >= 15
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R10_NEW_FLOOR
    assert new.category_accuracy >= HELDOUT_R10_NEW_FLOOR
    assert new.attribution_accuracy >= HELDOUT_R10_NEW_FLOOR


def test_round11_new_heldout_excerpts_hold_their_floor() -> None:
    new = _heldout_between(ROUND11_FIRST_PUBLIC, ROUND11_LAST_PUBLIC)
    assert new.total >= 22
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R11_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R11_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R11_NEW_FLOOR_ATTRIBUTION


def test_round12_new_heldout_excerpts_hold_their_floor() -> None:
    new = _heldout_between(ROUND12_FIRST_PUBLIC, ROUND12_LAST_PUBLIC)
    assert new.total >= 12
    called_fatal = {o.sample.id for o in new.healthy_classified_fatal}
    assert called_fatal <= KNOWN_HELDOUT_HEALTHY_CALLED_FATAL, called_fatal
    assert new.fatal_accuracy >= HELDOUT_R12_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R12_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R12_NEW_FLOOR_ATTRIBUTION


def test_round13_new_heldout_excerpts_hold_their_floor() -> None:
    new = _heldout_between(ROUND13_FIRST_PUBLIC, ROUND13_LAST_PUBLIC)
    assert new.total >= 15
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R13_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R13_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R13_NEW_FLOOR_ATTRIBUTION


def test_round14_new_heldout_excerpts_hold_their_floor() -> None:
    new = _heldout_between(ROUND14_FIRST_PUBLIC, ROUND14_LAST_PUBLIC)
    assert new.total >= 16
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R14_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R14_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R14_NEW_FLOOR_ATTRIBUTION


def test_round15_new_heldout_excerpts_hold_their_floor() -> None:
    new = _heldout_between(ROUND15_FIRST_PUBLIC, ROUND15_LAST_PUBLIC)
    assert new.total >= 12
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R15_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R15_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R15_NEW_FLOOR_ATTRIBUTION


def test_round16_new_heldout_excerpts_hold_their_floor() -> None:
    new = _heldout_between(ROUND16_FIRST_PUBLIC, ROUND16_LAST_PUBLIC)
    assert new.total >= 16
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R16_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R16_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R16_NEW_FLOOR_ATTRIBUTION


def test_round17_new_heldout_excerpts_hold_their_floor() -> None:
    new = _heldout_between(ROUND17_FIRST_PUBLIC, ROUND17_LAST_PUBLIC)
    assert new.total >= 14
    called_fatal = {o.sample.id for o in new.healthy_classified_fatal}
    assert called_fatal <= KNOWN_HELDOUT_HEALTHY_CALLED_FATAL, called_fatal
    assert new.fatal_accuracy >= HELDOUT_R17_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R17_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R17_NEW_FLOOR_ATTRIBUTION


def test_round18_new_heldout_excerpts_hold_their_blind_floor() -> None:
    new = _heldout_between(ROUND18_FIRST_PUBLIC, ROUND18_LAST_PUBLIC)
    assert new.total >= 18
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R18_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R18_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R18_NEW_FLOOR_ATTRIBUTION


def test_round19_new_heldout_excerpts_hold_their_blind_floors() -> None:
    a = _heldout_between(ROUND19A_FIRST_PUBLIC, ROUND19A_LAST_PUBLIC)
    assert a.total >= 16
    assert a.healthy_classified_fatal == []
    assert a.fatal_accuracy >= HELDOUT_R19A_NEW_FLOOR_FATAL
    assert a.category_accuracy >= HELDOUT_R19A_NEW_FLOOR_CATEGORY
    assert a.attribution_accuracy >= HELDOUT_R19A_NEW_FLOOR_ATTRIBUTION
    b = _heldout_between(ROUND19B_FIRST_PUBLIC, ROUND19B_LAST_PUBLIC)
    assert b.total >= 6
    assert b.healthy_classified_fatal == []
    assert min(b.fatal_accuracy, b.category_accuracy, b.attribution_accuracy) >= HELDOUT_R19B_NEW_FLOOR


def test_round20a_new_heldout_excerpts_hold_their_blind_floors() -> None:
    new = _heldout_between(ROUND20A_FIRST_PUBLIC, ROUND20A_LAST_PUBLIC)
    assert new.total >= 17
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R20A_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R20A_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R20A_NEW_FLOOR_ATTRIBUTION


def test_round20b_new_heldout_excerpts_hold_their_blind_floors() -> None:
    new = _heldout_between(ROUND20B_FIRST_PUBLIC, ROUND20B_LAST_PUBLIC)
    assert new.total >= 6
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R20B_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R20B_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R20B_NEW_FLOOR_ATTRIBUTION


def test_round21a_new_heldout_excerpts_hold_their_blind_floors() -> None:
    new = _heldout_between(ROUND21A_FIRST_PUBLIC, ROUND21A_LAST_PUBLIC)
    assert new.total >= 16
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R21A_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R21A_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R21A_NEW_FLOOR_ATTRIBUTION


def test_round21b_new_heldout_excerpts_hold_their_blind_floors() -> None:
    new = _heldout_between(ROUND21B_FIRST_PUBLIC, ROUND21B_LAST_PUBLIC)
    assert new.total >= 19
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R21B_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R21B_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R21B_NEW_FLOOR_ATTRIBUTION


def test_round22_new_heldout_excerpts_hold_their_blind_floors() -> None:
    new = _heldout_between(ROUND22_FIRST_PUBLIC, ROUND22_LAST_PUBLIC)
    assert new.total >= 15
    # The round's measure is "no healthy excerpt called fatal": every new held-out excerpt is healthy.
    assert all(not o.sample.fatal for o in new.outcomes)
    assert {o.sample.id for o in new.healthy_classified_fatal} == set()
    assert new.fatal_accuracy >= HELDOUT_R22_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R22_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R22_NEW_FLOOR_ATTRIBUTION


def test_round23_new_heldout_excerpts_hold_their_blind_floors() -> None:
    new = _heldout_between(ROUND23_FIRST_PUBLIC, ROUND23_LAST_PUBLIC)
    assert new.total >= 12
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R23_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R23_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R23_NEW_FLOOR_ATTRIBUTION


def test_round24_new_heldout_excerpts_hold_their_blind_floors() -> None:
    new = _heldout_between(ROUND24_FIRST_PUBLIC, ROUND24_LAST_PUBLIC)
    assert new.total >= 17
    # A third of the round is Slurm-side healthy look-alikes: none of them may read fatal.
    assert sum(1 for o in new.outcomes if not o.sample.fatal) >= 6
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R24_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R24_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R24_NEW_FLOOR_ATTRIBUTION


def test_round25_new_heldout_excerpts_hold_their_blind_floors() -> None:
    new = _heldout_between(ROUND25_FIRST_PUBLIC, ROUND25_LAST_PUBLIC)
    assert new.total >= 12
    # Healthy look-alikes and failures side by side: the round is not all one answer.
    assert sum(1 for o in new.outcomes if not o.sample.fatal) >= 5
    assert sum(1 for o in new.outcomes if o.sample.fatal) >= 7
    # pub1124 was called fatal blind (listed in KNOWN_HELDOUT_HEALTHY_CALLED_FATAL); no other may be.
    assert {o.sample.id for o in new.healthy_classified_fatal} <= {"pub1124"}
    assert new.fatal_accuracy >= HELDOUT_R25_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R25_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R25_NEW_FLOOR_ATTRIBUTION


def test_round26a_new_heldout_excerpts_hold_their_blind_floors() -> None:
    new = _heldout_between(ROUND26A_FIRST_PUBLIC, ROUND26A_LAST_PUBLIC)
    assert new.total >= 10
    # A random draw with healthy look-alikes beside the failures: none of them may read fatal.
    assert sum(1 for o in new.outcomes if not o.sample.fatal) >= 6
    assert new.healthy_classified_fatal == []
    assert new.fatal_accuracy >= HELDOUT_R26A_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R26A_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R26A_NEW_FLOOR_ATTRIBUTION


def test_round26b_new_heldout_excerpts_hold_their_blind_floors() -> None:
    new = _heldout_between(ROUND26B_FIRST_PUBLIC, ROUND26B_LAST_PUBLIC)
    assert new.total >= 14
    # A random draw with healthy look-alikes beside the failures: the round is not all one answer.
    assert sum(1 for o in new.outcomes if not o.sample.fatal) >= 6
    assert sum(1 for o in new.outcomes if o.sample.fatal) >= 8
    # pub1187 was called fatal blind (listed in KNOWN_HELDOUT_HEALTHY_CALLED_FATAL); no other may be.
    assert {o.sample.id for o in new.healthy_classified_fatal} <= {"pub1187"}
    assert new.fatal_accuracy >= HELDOUT_R26B_NEW_FLOOR_FATAL
    assert new.category_accuracy >= HELDOUT_R26B_NEW_FLOOR_CATEGORY
    assert new.attribution_accuracy >= HELDOUT_R26B_NEW_FLOOR_ATTRIBUTION


def test_four_digit_public_ids_fall_in_their_own_round_only() -> None:
    # Ids past pub999 are compared as numbers: "pub1000" sorts before "pub940" as text, which would put
    # round 21b's excerpts inside every earlier round's "up to pubN" measure.
    heldout = _parts()[HELDOUT]
    r21b = {o.sample.id for o in _heldout_between(ROUND21B_FIRST_PUBLIC, ROUND21B_LAST_PUBLIC).outcomes}
    assert "pub1000" in r21b
    assert r21b.isdisjoint(o.sample.id for o in _heldout_up_to(heldout, ROUND20B_LAST_PUBLIC).outcomes)
    assert r21b.isdisjoint(
        o.sample.id for o in _heldout_between(ROUND20A_FIRST_PUBLIC, ROUND20B_LAST_PUBLIC).outcomes
    )


def test_known_heldout_false_positives_are_still_wrong() -> None:
    wrong = {o.sample.id for o in _parts()[HELDOUT].healthy_classified_fatal}
    # A fixed one must leave the allowance list (it can only shrink).
    assert wrong >= KNOWN_HELDOUT_HEALTHY_CALLED_FATAL


def _outcome(
    conf: float, right: bool, nodes: tuple[str, ...] = (), got_nodes: tuple[str, ...] = ()
) -> Outcome:
    sample = Sample("x", "cuda_oom", "application", True, "https://x", "log", nodes=nodes)
    result = ClassifyResult(
        fatal=True,
        category="cuda_oom" if right else "segfault",
        attribution="application",
        nodes=list(got_nodes),
        evidence=[],
        confidence=conf,
    )
    return Outcome(sample, result)


def test_calibration_buckets_report_the_share_right() -> None:
    report = Report([_outcome(0.95, True), _outcome(0.92, False), _outcome(0.55, True), _outcome(1.0, True)])
    rows = {label: (n, share) for label, n, share in report.calibration()}
    assert rows == {"0.90-1.00": (3, 2 / 3), "0.50-0.60": (1, 1.0)}


def test_node_accuracy_counts_only_labelled_failures() -> None:
    report = Report(
        [_outcome(0.8, True, ("gpu-07",), ("GPU-07",)), _outcome(0.8, True, ("n1",), ()), _outcome(0.8, True)]
    )
    assert len(report.node_labelled) == 2 and report.node_accuracy == 0.5
