#!/usr/bin/env bash
set -u
client/bench/device_service_round.sh $OUT/r 3 5
rc=$?
tar czf $OUT/r.tgz -C $OUT r
exit $rc
