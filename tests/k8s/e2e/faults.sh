# Sourced by test_e2e.sh (its K, NS and NODE): a learner's process ended
# on the real node the way a program fails, its pod left to the operator
# (docs/operator.md, Failure policy):
#   crash_learner POD  its learner process killed with SIGKILL from the
#                      node: the container ends with exit code 137 and
#                      reason Error, as a crash does (a signal such as
#                      SIGSEGV sent from outside never reaches a
#                      container's first process, which has no handler
#                      for it)
#   oom_learner POD    the kernel's OOM killer takes the learner for its
#                      memory limit (spec.learners.resources.memory): a
#                      process of this host joins the container's memory
#                      cgroup (v1) and fills it, the learner's
#                      oom_score_adj raised to 1000 so that the kernel
#                      picks the learner first (the filler goes next if
#                      it allocates before the learner's memory is
#                      freed); reason OOMKilled
# Both print the learner's PID on this host, or fail.

# The learner container's PID on this host (its containerd task).
learner_pid() {
	local cid
	cid=$(K -n "$NS" get pod "$1" -o jsonpath='{.status.containerStatuses[?(@.name=="learner")].containerID}')
	cid=${cid#containerd://}
	[ -n "$cid" ] || return 1
	ctr --address "$NODE/containerd.sock" --namespace k8s.io task ls |
		awk -v c="$cid" '$1 == c && $3 == "RUNNING" {print $2}' | grep .
}

crash_learner() {
	local pid
	pid=$(learner_pid "$1") && kill -KILL "$pid" && echo "$pid"
}

oom_learner() {
	local pid cg
	pid=$(learner_pid "$1") || return 1
	cg=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' "/proc/$pid/cgroup")
	cg=/sys/fs/cgroup/memory$cg
	[ -f "$cg/memory.limit_in_bytes" ] && [ -f "$cg/cgroup.procs" ] || return 1
	echo 1000 >"/proc/$pid/oom_score_adj" || return 1
	# until the learner is gone (or a zombie), 16 MiB at a time, each
	# byte written so that the cgroup is charged; 60 s at most
	PID=$pid CG=$cg /usr/bin/python3 - >/dev/null 2>&1 <<'PYEOF' &
import os, time
open(os.environ["CG"] + "/cgroup.procs", "w").write(str(os.getpid()))
def alive(pid):
    try:
        return open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
hold, end = [], time.time() + 60
while time.time() < end and alive(os.environ["PID"]):
    hold.append(b"\1" * (16 << 20))
PYEOF
	echo "$pid"
}

# fault_step JOB LOG: the next of the two faults once its time has come,
# learner 1's crash then learner 2's OOM kill, each when all four learner
# pods are Ready and the one before it is back: its pod replaced, Ready,
# and a new join of it in the syncer's log LOG. Sets fault (0 none yet,
# 1 crashed, 2 OOM-killed, 3 both back), crash_back and oom_back (seconds
# from the fault to the learner back).
fault=0 crash_back="" oom_back="" fault_at="" fault_uid="" fault_joins=0
fault_ready() {   # learner pods Ready, not terminating
	K -n "$NS" get pods -l "ddiloco.io/job=$1,ddiloco.io/role=learner" -o \
		jsonpath='{range .items[*]}{.metadata.deletionTimestamp}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
		grep -cx True
}
fault_back() {   # fault_back JOB I LOG: learner I back since the fault
	local u
	u=$(K -n "$NS" get pod "$1-learner-$2" -o jsonpath='{.metadata.uid}' 2>/dev/null)
	[ -n "$u" ] && [ "$u" != "$fault_uid" ] && [ "$(fault_ready "$1")" = 4 ] &&
		[ "$(grep -c "learner $2 joined" "$3" 2>/dev/null)" -gt "$fault_joins" ]
}
fault_hit() {   # fault_hit JOB I WHAT: the fault on learner I
	local pid
	fault_uid=$(K -n "$NS" get pod "$1-learner-$2" -o jsonpath='{.metadata.uid}')
	fault_joins=$(grep -c "learner $2 joined" "$LOG_FAULT" 2>/dev/null)
	if [ "$3" = crash ]; then
		pid=$(crash_learner "$1-learner-$2") || return 1
		say "learner $2's process (pid $pid here) killed with SIGKILL: a crash"
	else
		pid=$(oom_learner "$1-learner-$2") || return 1
		say "learner $2 (pid $pid here) filled to its memory limit: the kernel's OOM killer"
	fi
	fault_at=$(now)
}
fault_step() {
	LOG_FAULT=$2
	case $fault in
	0)	[ "$(fault_ready "$1")" = 4 ] && fault_hit "$1" 1 crash && fault=1 ;;
	1)	if fault_back "$1" 1 "$2"; then
			crash_back=$(elapsed "$fault_at")
			say "learner 1 back $crash_back s after its crash"
			fault_hit "$1" 2 oom && fault=2
		fi ;;
	2)	if fault_back "$1" 2 "$2"; then
			oom_back=$(elapsed "$fault_at")
			say "learner 2 back $oom_back s after its OOM kill"
			fault=3
		fi ;;
	esac
	return 0
}
