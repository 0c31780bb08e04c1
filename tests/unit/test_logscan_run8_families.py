"""The evidence families learned from locked run 8 (batch K1_, scored blind first): a hang
shown as py-spy dumps pasted into a log, and init_process_group's store barrier waiting
with fewer (or more) workers than the world. Held on the development set's real logs
(thread URLs in their sidecars) and on the kb examples' real lines; the dumps are also
read with no process started (diagnose/stackdump.py is pure)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_of

from ddpdoctor.diagnose import LogInput, diagnose_logs, stackdump

REAL = Path(__file__).parents[1] / "fixtures" / "reallogs"


def _first(path: Path):
    findings = findings_of(path)
    return findings[0] if findings else None


def test_one_process_in_its_data_loader_while_the_others_broadcast_is_hang_dataloader():
    f = _first(REAL / "F4_bloom176b_eval_hang_dataloader_deadlock.log")
    assert (f.id, f.severity, f.ranks) == ("HANG_DATALOADER", "error", [])
    assert "process 2 (line 25) waits for its data loader" in f.title
    assert any("waits in broadcast" in p for p in f.evidence["processes"])


def test_a_data_iterator_of_its_own_waiting_on_a_queue_is_data_loading():
    # fairseq's own iterator (fairseq/data/iterators.py) over queue.get, not torch's
    f = _first(REAL / "L2_fairseq_rank0_dataloader_hang_multinode.log")
    assert (f.id, f.ranks) == ("HANG_DATALOADER", [])


def test_a_lone_process_waiting_in_a_collective_says_the_missing_rank_is_not_dumped():
    f = _first(REAL / "F4_m4_rank0_dstate_fs_freeze_others_in_barrier.log")
    assert f.id == "HANG_RANK_MISSING_COLLECTIVE" and "not in the dump" in f.title


def _dump(text: str) -> list[stackdump.DumpedProcess]:
    lines = list(enumerate(text.splitlines(), 1))
    return stackdump.classify(stackdump.parse(lines))


# py-spy's own format (the frames of the real dumps above, shortened)
COMPUTING = ('Thread 835990 (active): "MainThread"\n'
             "    train (megatron/training.py:915)\n"
             "    pretrain (megatron/training.py:187)\n")
BROADCAST = ('Thread 835995 (active): "MainThread"\n'
             "    broadcast (torch/distributed/distributed_c10d.py:1191)\n"
             "    _aggregate_total_loss (deepspeed/runtime/pipe/engine.py:540)\n"
             "    train_step (megatron/training.py:436)\n")
ALL_REDUCE = ('Thread 1 (idle): "MainThread"\n'
              "    all_reduce (torch/distributed/distributed_c10d.py:1320)\n"
              "    step (train.py:40)\n")


def test_dumped_processes_are_compared():
    procs = _dump(COMPUTING + BROADCAST)
    assert [(p.kind, p.op) for p in procs] == [("compute", ""), ("collective", "broadcast")]
    assert procs[1].where == "megatron/training.py:436 in train_step"  # deepspeed: a library
    assert stackdump.judge(procs)[0] == "HANG_RANK_MISSING_COLLECTIVE"
    assert stackdump.judge(_dump(BROADCAST + ALL_REDUCE))[0] == "HANG_COLLECTIVE_MISMATCH"
    assert stackdump.judge(_dump(COMPUTING)) is None  # a job computing: no hang shown


def test_a_dump_that_shows_no_hang_is_no_failure(tmp_path):
    log = tmp_path / "dump.log"
    log.write_text("step 10 loss 2.1\n" + COMPUTING)
    assert diagnose_logs([LogInput(str(log))])[0] == []


def test_frames_not_right_under_their_header_are_not_the_dump():
    procs = _dump('Thread 1 (idle): "MainThread"\n\nsome text\n'
                  "    all_reduce (torch/distributed/distributed_c10d.py:1320)\n")
    assert procs == []


def test_store_barrier_with_a_rank_missing_names_it(tmp_path):
    # pytorch-lightning#4420: ranks 0-3 and 5-7 wait, worker_count 7 of 8: rank 4 never came
    line = ("INFO:root:Waiting in store based barrier to initialize process group for rank: "
            "{r}, key: store_based_barrier_key:1 (world_size=8, worker_count=7, "
            "timeout=0:30:00)\n")
    log = tmp_path / "init.log"
    log.write_text("".join(line.format(r=r) for r in (0, 6, 2, 1, 7, 3, 5)))
    f = _first(log)
    assert (f.id, f.ranks) == ("RANK_UNRESPONSIVE", [4])
    assert "1 of 8 ranks never reached init_process_group: rank 4" in f.title
    log.write_text(line.format(r=2) + line.format(r=7))  # only two say it: none named
    assert (_first(log).id, _first(log).ranks) == ("RANK_UNRESPONSIVE", [])


def test_store_barrier_with_more_workers_than_the_world_is_a_shared_rendezvous(tmp_path):
    log = tmp_path / "init.log"
    log.write_text("Waiting in store based barrier to initialize process group for rank: 0, "
                   "key: store_based_barrier_key:1 (world_size=2, worker_count=4, timeout=1 "
                   "day, 0:00:00)\n")
    assert _first(log).id == "ENV_PORT_IN_USE"


def test_a_loss_that_jumps_and_stays_up_is_a_warning_never_an_error():
    # BLOOM tr1-13B: 2.77 -> 7.34 and still 6.85 where the excerpt ends; the run recovered
    # 500 iterations later: from the log alone a divergence and such a spike look the same
    f = _first(REAL / "F4_tr1_13b_fp16_loss_spike_recovered.log")
    assert (f.id, f.severity) == ("GRAD_NONFINITE", "warning")
    assert "jumped from 2.773 to 7.344 at iteration 29050" in f.title


def test_a_loss_spike_that_comes_back_is_no_finding():
    # BLOOM-176B: 2.2 -> 5.1 -> 2.8 within the log
    findings, _ = diagnose_logs([LogInput(str(REAL / "F4_bloom176b_lm_loss_spike_recovered.log"),
                                          rank_from_path=False)])
    assert not [f for f in findings if f.id == "GRAD_NONFINITE"]


def test_a_slurm_node_failure_is_a_failure_whatever_tail_its_line_has(tmp_path):
    log = tmp_path / "slurm.log"
    log.write_text("srun: error: Node failure on jean-zay-iam37\n"
                   "slurmstepd: error: *** STEP 1943824.0 ON jean-zay-iam17 CANCELLED AT "
                   "2023-03-06T03:17:51 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n")
    findings, _ = diagnose_logs([LogInput(str(log))])
    assert findings and findings[0].severity == "error"
    from ddpdoctor.core.next_step import decide

    assert decide(findings).action.value == "drain_node"


def test_an_nvswitch_fabric_that_is_not_ready_is_the_nodes_gpu_health(tmp_path):
    # NCCL's NVLS bind failure names the Fabric Manager; CUDA's 802 is the same fabric down
    log = tmp_path / "nvls.log"
    log.write_text(
        "torch.distributed.DistBackendError: NCCL error in: /var/lib/jenkins/workspace/torch/"
        "csrc/distributed/c10d/NCCLUtils.cpp:93, unhandled cuda error (run with NCCL_DEBUG=INFO "
        "for details), NCCL version 2.29.3\n"
        "Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 "
        "'the operation cannot be performed in the present state'.\n"
        "This is usually caused by a system or configuration error in the Fabric Manager or "
        "NVSwitches.\n")
    f = _first(log)
    assert (f.id, f.severity) == ("GPU_HEALTH", "error") and "Fabric Manager" in f.title
    log.write_text("RuntimeError: cuda runtime error (802) : system not yet initialized at "
                   "/opt/conda/conda-bld/pytorch_1579022034529/work/aten/src/THC/"
                   "THCGeneral.cpp:50\n")
    assert _first(log).id == "GPU_HEALTH"
