import json, sys, os
p = "/work/stranger/b/manifest.json"
m = json.load(open(p)) if os.path.exists(p) else []
e = json.loads(sys.stdin.read())
m = [x for x in m if x["file"] != e["file"]] + [e]
m.sort(key=lambda x: x["file"])
json.dump(m, open(p, "w"), indent=1)
print(len(m), "entries")
