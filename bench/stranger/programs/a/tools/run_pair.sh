#!/bin/bash
# usage: run_pair.sh NN_name.py
cd /work/stranger/a
f=$1
echo "== buggy $f"; ( time timeout 120 /work/main/.venv/bin/python $f 2>&1 | grep -v -i warn | tail -${2:-4} ) 2>&1 | grep -v '^$' | grep -v user | grep -v sys
if [ -f fixed/$f ]; then echo "== fixed $f"; ( cd fixed; ( time timeout 120 /work/main/.venv/bin/python $f 2>&1 | grep -v -i warn | tail -${2:-4} ) 2>&1 | grep -v '^$'| grep -v user | grep -v sys ); fi
