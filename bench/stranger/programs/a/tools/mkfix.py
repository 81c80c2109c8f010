# usage: python mkfix.py FILE  (reads pairs of OLD/NEW from stdin separated by lines '=====' and '-----')
import sys
f=sys.argv[1]
s=open('/work/stranger/a/'+f).read()
blocks=sys.stdin.read().split('\n=====\n')
for b in blocks:
    if not b.strip(): continue
    old,new=b.split('\n-----\n')
    if new.endswith('\n') and not old.endswith('\n'): new=new[:-1]
    assert s.count(old)==1, (f, old, s.count(old))
    s=s.replace(old,new)
open('/work/stranger/a/fixed/'+f,'w').write(s)
