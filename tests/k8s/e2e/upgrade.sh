# Sourced by test_e2e.sh (its helpers, namespace and operator): a helm
# upgrade under a training job (docs/operator.md, Rolling learners). Job
# e2e-up (examples/e2e.yaml, chaos off, 12 M tokens, its checkpoints on a
# volume) trains; once it has merged UPGRADE_AT rounds the chart is
# upgraded to the image tag e2e-up (the same image under another name in
# the node's containerd), which is also the runtime image. Asserted: the
# operator's new pod takes over; every learner pod is replaced once, one
# at a time (never fewer than minQuorum of them Ready in a watch of every
# change), its sidecar on the new image and its learner container on the
# job's own; the syncer's StatefulSet is written once and its pod runs
# the new image, resuming from its checkpoint (no ModelStartedOver);
# rounds merge again after the upgrade and the job Succeeds.
UJOB=e2e-up UBUDGET=12000000 UPGRADE_AT=5
quiet_job $UJOB $UBUDGET >"$WORK/$UJOB.yaml" || fail "the upgrade job's file"
pv_for $UJOB || fail "the checkpoint volume of $UJOB"
ctr --address "$NODE/containerd.sock" --namespace k8s.io images tag --force \
	docker.io/library/ddiloco:latest docker.io/library/ddiloco:e2e-up >/dev/null ||
	fail "tag ddiloco:e2e-up in the node's containerd"
echo "--- load before job $UJOB: $(uptime)"
t_apply=$(now) t_printed=0
K -n "$NS" apply -f "$WORK/$UJOB.yaml" >/dev/null || fail "kubectl apply $UJOB"
until_ok 300 "job $UJOB merged $UPGRADE_AT rounds" \
	'st=$(status_json '$UJOB') && [ -n "$st" ] && echo "$st" >"$WORK/u-status.json" &&
	 [ "$(sj "$WORK/u-status.json" "s[\"round\"]")" -ge '$UPGRADE_AT' ]'
round_up=$(sj "$WORK/u-status.json" 's["round"]')
# kubectl itself in the background (not a function's subshell), so that
# the kill below ends the watch
"$KUBECTL" -n "$NS" get pods -l ddiloco.io/job=$UJOB,ddiloco.io/role=learner --watch \
	--output-watch-events -o json >"$WORK/u-watch.json" 2>/dev/null &
UWATCH=$!
until_ok 30 "the watch's first events" '[ -s "$WORK/u-watch.json" ]'
old_op=$(K -n "$OPNS" get pods -l app.kubernetes.io/instance=$REL -o jsonpath='{.items[0].metadata.name}')
say "job $UJOB at round $round_up: helm upgrade to ddiloco:e2e-up"
t_up=$(now)
"$HELM" upgrade "$REL" "$ROOT/charts/ddiloco" -n "$OPNS" --reuse-values \
	--set image.tag=e2e-up --wait --timeout 180s >"$WORK/helm-up.log" 2>&1 ||
	{ cat "$WORK/helm-up.log"; fail "helm upgrade"; }
until_ok 120 "the old operator pod $old_op gone" \
	'! K -n '$OPNS' get pod '$old_op' >/dev/null 2>&1'
sidecars() {   # the learner pods' sidecar images, one line, sorted
	K -n "$NS" get pods -l ddiloco.io/job=$UJOB,ddiloco.io/role=learner \
		-o jsonpath='{range .items[*]}{.spec.initContainers[0].image}{"\n"}{end}' | sort | tr '\n' ' '
}
until_ok 300 "every learner of $UJOB on ddiloco:e2e-up, Ready, and its syncer's template" \
	'[ "$(sidecars)" = "ddiloco:e2e-up ddiloco:e2e-up ddiloco:e2e-up ddiloco:e2e-up " ] &&
	 [ "$(jp ddjob/'$UJOB' "{.status.learners.ready}")" = 4 ] &&
	 [ "$(jp statefulset/'$UJOB'-syncer "{.spec.template.spec.containers[0].image}")" = ddiloco:e2e-up ]'
t_rolled=$(elapsed "$t_up")
kill "$UWATCH" 2>/dev/null
limgs=$(K -n "$NS" get pods -l ddiloco.io/job=$UJOB,ddiloco.io/role=learner \
	-o jsonpath='{.items[*].spec.containers[0].image}')
# 12 M tokens take 400 s and more on a slower CPU of the kind (about
# 30,000 tokens a second): a deadline, not a wait
until_ok 900 "job $UJOB Succeeded" '[ "$(jp ddjob/'$UJOB' "{.status.phase}")" = Succeeded ]'
st=$(status_json $UJOB || true)
[ -n "$st" ] && echo "$st" >"$WORK/u-status.json"
echo "--- the Events of job $UJOB"
K -n "$NS" get events --field-selector "involvedObject.name=$UJOB" \
	--sort-by=.lastTimestamp 2>/dev/null | tail -15
fewest=$(python3 "$ROOT/tests/k8s/podwatch.py" fewest "$WORK/u-watch.json" 4 | cut -d" " -f1)
nlr=$(K -n "$NS" get events --field-selector involvedObject.name=$UJOB,reason=LearnerRolled -o name | wc -l)
nsr=$(K -n "$NS" get events --field-selector involvedObject.name=$UJOB,reason=SyncerRolled -o name | wc -l)
say "upgrade: rolled in $t_rolled s, LearnerRolled $nlr, SyncerRolled $nsr, fewest Ready ${fewest:-?}"
check "job $UJOB: each of its 4 learners rolled once after the upgrade (LearnerRolled $nlr)" '[ "$nlr" -eq 4 ]'
check "job $UJOB: never fewer than 3 learners Ready during the roll (fewest ${fewest:-?})" \
	'[ "${fewest:-0}" -ge 3 ]'
check "job $UJOB: the learner containers kept the job's image ($limgs)" \
	'[ "$limgs" = "ddiloco:latest ddiloco:latest ddiloco:latest ddiloco:latest" ]'
check "job $UJOB: the syncer's StatefulSet written once (SyncerRolled $nsr), on ddiloco:e2e-up" \
	'[ "$nsr" -eq 1 ]'
check "job $UJOB: the syncer resumed its model (no ModelStartedOver)" \
	'[ -z "$(jp ddjob/'$UJOB' "{.status.conditions[?(@.type==\"ModelStartedOver\")].status}" | grep True)" ]'
# the job's own last round (the syncer's pod may be gone by now)
uround=$(jp ddjob/$UJOB '{.status.progress.round}')
check "job $UJOB: rounds merged after the upgrade (round ${uround:-?} > $round_up) and it Succeeded" \
	'[ "${uround:-0}" -gt "$round_up" ] && [ "$(jp ddjob/'$UJOB' "{.status.phase}")" = Succeeded ]'
K -n "$NS" delete ddjob $UJOB --wait=true --timeout=120s >/dev/null 2>&1
