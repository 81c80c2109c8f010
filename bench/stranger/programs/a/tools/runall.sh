#!/bin/bash
cd /work/stranger/a
run() { d=$(dirname $1); b=$(basename $1); tag=$(echo $1 | tr / _); s=$(date +%s); (cd $d && timeout 180 /work/main/.venv/bin/python $b > /work/stranger/a/tools/results/$tag.log 2>&1; echo "rc=$?" >> /work/stranger/a/tools/results/$tag.log); echo "secs=$(( $(date +%s)-s ))" >> tools/results/$tag.log; }
export -f run
ls [0-9]*.py fixed/[0-9]*.py | xargs -P 2 -I{} bash -c 'run {}'
rm -rf fixed/checkpoints_24
echo ALLDONE
