#!/bin/bash
# A device check beside tools/gpu_verify.py (docs/development.md): a real GPU job hung with
# rank 1 in a host sync (torch.cuda.synchronize behind a spinning kernel) while rank 0 waits
# in all_reduce (gloo, both on cuda:0); py-spy dumps of it (JSON and text, with and without
# --native), then ddpdoctor attach (plain and --native) and diagnose on the dumps. Needs the
# wheel in .whl/ and py-spy carried (.venv/bin/py-spy); writes $OUT/attach.tgz.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/ddpdoctor-*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
cp .venv/bin/py-spy /usr/local/bin/py-spy; chmod +x /usr/local/bin/py-spy; py-spy --version
D=$OUT/attach; mkdir -p $D
python3 -c "import torch;print(torch.__version__, torch.cuda.get_device_name(0))" > $D/versions.txt 2>&1
cat > /tmp/hung.py <<'PY'
import torch, torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
torch.cuda.set_device(0)
x = torch.ones(1024, device="cuda")
dist.all_reduce(x)
print("rank", r, "ready", flush=True)
if r == 1:
    torch.cuda._sleep(2**60)
    torch.cuda.synchronize()
dist.all_reduce(x)
PY
cd /tmp
setsid timeout 150 python3 -m torch.distributed.run --nproc-per-node 2 /tmp/hung.py > $D/job.log 2>&1 &
for i in $(seq 60); do [ "$(grep -c ready $D/job.log)" -ge 2 ] && break; sleep 1; done
sleep 3
ps -eo pid,ppid,stat,cmd | grep -E "hung|distributed.run" | grep -v grep > $D/ps.txt
TR=$(pgrep -f "torch.distributed.run --nproc" | head -1)
for p in $(pgrep -f "/tmp/hung.py" ); do echo "== $p"; timeout 20 py-spy dump --pid $p; done > $D/pyspy_raw.txt 2>&1
for p in $(pgrep -f "^/.*python3 -u /tmp/hung.py" ); do timeout 20 py-spy dump --json --pid $p > $D/pyspy_$p.json 2>&1; timeout 20 py-spy dump --json --native --pid $p > $D/pyspy_native_$p.json 2>&1; timeout 20 py-spy dump --native --pid $p > $D/pyspy_native_$p.txt 2>&1; done
cat /proc/sys/kernel/yama/ptrace_scope > $D/ptrace_scope.txt 2>&1
timeout 60 python3 -m ddpdoctor attach --json $D/attach.json $TR > $D/attach.txt 2>&1; echo "rc=$?" >> $D/attach.txt
timeout 90 python3 -m ddpdoctor attach --native --json $D/attach_native.json $TR > $D/attach_native.txt 2>&1; echo "rc=$?" >> $D/attach_native.txt
timeout 30 python3 -m ddpdoctor diagnose $D/pyspy_raw.txt > $D/diagnose_pyspy.txt 2>&1; echo "rc=$?" >> $D/diagnose_pyspy.txt
cat $D/pyspy_native_*.txt > $D/pyspy_native_all.txt
timeout 30 python3 -m ddpdoctor diagnose $D/pyspy_native_all.txt > $D/diagnose_native.txt 2>&1; echo "rc=$?" >> $D/diagnose_native.txt
pkill -9 -f /tmp/hung.py; pkill -9 -f "torch.distributed.run"
sleep 2; cat $D/attach.txt | tail -40; tail -20 $D/diagnose_pyspy.txt; head -12 $D/attach_native.txt; tail -8 $D/diagnose_native.txt; ls -la $D
cd $OUT && tar czf /tmp/attach.tgz attach && rm -rf attach && mv /tmp/attach.tgz $OUT/ && ls -la $OUT
