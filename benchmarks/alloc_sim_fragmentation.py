"""A best-fit model of the CUDA caching allocator's large pool on the fragmentation workload.

Source of the figures in rewriter/diagnose/memory.py: split a free block when more than 1 MiB is
left, merge neighbours on free, round new segments to 2 MiB (20 MiB under 10 MiB), best fit by
size; the workload's allocation sequence (fixtures/workloads/fragmentation, WORKLOAD_SIZE=large)
at each harness shape, 2 warm-up steps then 3 steady steps. CPU only, a few seconds:

    python benchmarks/alloc_sim_fragmentation.py

It is a model, not the allocator (no streams, no small pool, no OOM flush): the H200 run of
benchmarks/diagnose_workloads.py is the check.
"""
import torch
MiB=1<<20
def sizes_for(batch,steps):
    g = torch.Generator().manual_seed(batch * 131 + steps)
    return torch.randint(2, 9, (steps,), generator=g).tolist()
def rnd(n):  # large pool rounding: 512B, then segments
    n = (n+511)//512*512
    return n
def seg_size(n):
    if n <= 1*MiB: return 2*MiB
    if n < 10*MiB: return 20*MiB
    return (n + 2*MiB-1)//(2*MiB)*(2*MiB)
class Alloc:
    def __init__(s): s.segs=[]; s.alloc=0; s.peak=0; s.mallocs=0
    # seg: list of blocks [start,size,used]
    def malloc(s,n):
        n=rnd(n); best=None
        for si,seg in enumerate(s.segs):
            for bi,b in enumerate(seg['blocks']):
                if not b[2] and b[1]>=n and (best is None or b[1]<best[2]):
                    best=(si,bi,b[1])
        if best is None:
            sz=seg_size(n); s.segs.append({'size':sz,'blocks':[[0,sz,False]]}); s.mallocs+=1
            best=(len(s.segs)-1,0,sz)
        si,bi,_=best; seg=s.segs[si]; b=seg['blocks'][bi]
        if b[1]-n > 1*MiB:
            seg['blocks'].insert(bi+1,[b[0]+n,b[1]-n,False]); b[1]=n
        b[2]=True; s.alloc+=b[1]; s.peak=max(s.peak,s.alloc)
        return (id(seg),b[0])
    def free(s,h):
        for seg in s.segs:
            if id(seg)!=h[0]: continue
            bl=seg['blocks']
            for i,b in enumerate(bl):
                if b[0]==h[1]:
                    b[2]=False; s.alloc-=b[1]
                    # merge
                    j=i
                    if j+1<len(bl) and not bl[j+1][2]: b[1]+=bl[j+1][1]; del bl[j+1]
                    if j>0 and not bl[j-1][2]: bl[j-1][1]+=b[1]; del bl[j]
                    return
    def empty(s): s.segs=[g for g in s.segs if any(b[2] for b in g['blocks'])]
    def reserved(s): return sum(g['size'] for g in s.segs)
base=64*MiB
def step(A,sz):
    kept=[]
    for i,x in enumerate(sz):
        h=A.malloc(base*x); A.free(h)
        kept.append(A.malloc((base//4*x//3+i)*4))
    for h in kept: A.free(h)
for shape in [(8,12),(8,16),(8,20)]:
    sz=sizes_for(*shape); A=Alloc()
    for _ in range(2): step(A,sz)
    A.peak=A.alloc; r0=A.reserved(); m0=A.mallocs
    for _ in range(3): step(A,sz)
    print(shape, sz, 'reserved',A.reserved()/MiB,'peak alloc',A.peak/MiB,'growth',(A.reserved()-r0)/MiB,'mallocs',A.mallocs-m0, 'waste share', (A.reserved()-A.peak)/A.peak)
print("cycling shapes")
shapes=[sizes_for(8,12),sizes_for(8,16),sizes_for(8,20)]
A=Alloc()
for sz in shapes: step(A,sz)
A.peak=A.alloc; r0=A.reserved(); m0=A.mallocs
for _ in range(2):
    for sz in shapes: step(A,sz)
print('reserved',A.reserved()/MiB,'peak alloc',A.peak/MiB,'growth',(A.reserved()-r0)/MiB,'mallocs',A.mallocs-m0,'waste share',(A.reserved()-A.peak)/A.peak)
