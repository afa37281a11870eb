#!/usr/bin/env python3
"""Fails if any crate's modules import each other in a circle (issue 14: no import cycles in
any crate). A module depends on another when it names it through `crate::` or `super::`
outside its tests. Usage: scripts/check-import-cycles.py crates/*"""
import re,os,sys
def modules(src):
    mods={}
    for dp,_,fs in os.walk(src):
        for f in fs:
            if not f.endswith('.rs'): continue
            p=os.path.join(dp,f); rel=os.path.relpath(p,src)[:-3]
            parts=rel.split('/')
            if parts[-1]=='mod': parts=parts[:-1]
            name='::'.join(parts) if parts!=['lib'] else 'crate'
            mods[name]=open(p).read()
    return mods
def deps(mods):
    g={}
    for m,s in mods.items():
        # drop test modules
        cut=s.find('#[cfg(test)]')
        if cut>=0: s=s[:cut]
        refs=set()
        for r in re.findall(r'crate::([a-z_]+(?:::[a-z_]+)*)', s):
            parts=r.split('::')
            # longest module prefix
            for k in range(len(parts),0,-1):
                cand='::'.join(parts[:k])
                if cand in mods: refs.add(cand); break
        # super:: within submodules
        if '::' in m or m in mods:
            parent=m.rsplit('::',1)[0] if '::' in m else 'crate'
            for r in re.findall(r'\bsuper::([a-z_]+)', s):
                sib=(parent+'::'+r) if parent!='crate' else r
                if sib in mods: refs.add(sib)
                elif parent in mods: refs.add(parent)
        refs.discard(m)
        # a submodule depending on its parent is a cycle only if parent depends on it beyond declaring it
        g[m]=refs
    return g
def find_cycles(g):
    cycles=[]
    idx={}; low={}; st=[]; on=set(); c=[0]
    def sc(v):
        idx[v]=low[v]=c[0]; c[0]+=1; st.append(v); on.add(v)
        for w in g.get(v,()):
            if w not in idx: sc(w); low[v]=min(low[v],low[w])
            elif w in on: low[v]=min(low[v],idx[w])
        if low[v]==idx[v]:
            comp=[]
            while True:
                w=st.pop(); on.discard(w); comp.append(w)
                if w==v: break
            if len(comp)>1: cycles.append(comp)
    sys.setrecursionlimit(10000)
    for v in g:
        if v not in idx: sc(v)
    return cycles
bad = False
for crate in sys.argv[1:]:
    if not os.path.isdir(os.path.join(crate, 'src')):
        continue
    cycles = find_cycles(deps(modules(os.path.join(crate, 'src'))))
    if cycles:
        bad = True
        print(f"{crate}: modules in a cycle: {cycles}")
sys.exit(1 if bad else 0)
