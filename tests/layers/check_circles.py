#!/usr/bin/env python3
"""No arrow back up inside a library (docs/architecture.md "Layers"):
    python3 check_circles.py ROOT

Inside one library a header and the source of the same name are one module (judge/gate.h with
src/judge/gate.cpp); a file's include of another file of its library is an arrow between their modules.
The modules of a library must form no circle: an umbrella header that includes a module whose source
includes the umbrella back is such a circle (the library then has no bottom to build on). Each circle is
printed with the file-level includes that close it, and the check fails when there is any.

The libraries and their folders are check_layers.cmake's table (one list for both checks)."""
import collections
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
SOURCES = (".h", ".hpp", ".cpp", ".c", ".cu", ".cuh")


def libraries():
    text = open(os.path.join(HERE, "check_layers.cmake")).read()
    return re.findall(r'"\d+\|([A-Za-z0-9_]+)\|([^|"]+)\|', text)


def module_of(path, folder):
    rel = os.path.relpath(path, folder).replace(os.sep, "/")
    rel = re.sub(r"^(include/tandem/[^/]+/|include/|src/)", "", rel)
    return os.path.splitext(rel)[0]


def circles_of(folder):
    files = [os.path.join(d, f) for d, _, names in os.walk(folder) for f in names if f.endswith(SOURCES)]
    real = {os.path.realpath(f): f for f in files}
    arrows = collections.defaultdict(set)
    why = {}
    for f in files:
        for inc in INCLUDE.findall(open(f, errors="replace").read()):
            candidates = [os.path.join(os.path.dirname(f), inc), os.path.join(folder, "include", inc),
                          os.path.join(folder, "src", inc)]
            target = next((real[os.path.realpath(c)] for c in candidates if os.path.realpath(c) in real), None)
            if target is None:
                continue
            a, b = module_of(f, folder), module_of(target, folder)
            if a != b:
                arrows[a].add(b)
                why.setdefault((a, b), (f, inc))
    # Tarjan's strongly connected components, iteratively (a library may have hundreds of modules).
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted({module_of(f, folder) for f in files}):
        if root in index:
            continue
        work = [(root, iter(sorted(arrows[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(arrows[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    members = set(component)
                    found.append(sorted(why[(a, b)] for a in component for b in arrows[a] if b in members))
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_circles.py ROOT")
    root = sys.argv[1]
    circles, checked = 0, 0
    for name, folder in libraries():
        path = os.path.join(root, folder)
        if not os.path.isdir(path):
            continue
        checked += 1
        for arrows in circles_of(path):
            circles += 1
            print(f"circle in {name}: " + "; ".join(f"{os.path.relpath(f, root)} includes {inc}" for f, inc in arrows))
    if checked == 0:
        sys.exit(f"check_circles: no library folder under {root} (wrong ROOT?)")
    if circles:
        print(f"check_circles: {circles} circle(s) of includes inside a library (docs/architecture.md \"Layers\")")
        sys.exit(1)
    print(f"check_circles: {checked} libraries, no include runs back up inside any")


if __name__ == "__main__":
    main()
