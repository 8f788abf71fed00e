#pragma once
// HEADROOM_CPU_CLONES on a function that holds a hot loop compiles it for
// AVX-512, AVX2+FMA and baseline x86-64, picked once at load time (GCC's
// target_clones); flatten inlines its helpers (and lambdas) into each clone,
// so that they too use the clone's instructions.  An OpenMP region in the
// function is cloned with it.  Empty off x86-64, in builds for AVX2 already
// (HEADROOM_NATIVE), with Clang (14 rejects clones of templates), and with
// -DHEADROOM_CPU_CLONES= .  AVX-512 (v4) too: no slower than v3 on Zen 4 (docs/performance.md).
#ifndef HEADROOM_CPU_CLONES
#if defined(__x86_64__) && defined(__ELF__) && !defined(__AVX2__) && !defined(__clang__) && __GNUC__ >= 11
#define HEADROOM_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#else
#define HEADROOM_CPU_CLONES
#endif
#endif
