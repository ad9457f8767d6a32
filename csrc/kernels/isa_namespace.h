// Kernel code is compiled once per ISA, each time inside that ISA's namespace
// (sparselab::isa_avx2, sparselab::isa_avx512, ...), which the translation
// unit including it names in SPARSELAB_ISA_NS. Every function, template
// instantiation and lambda an ISA-flagged file emits then carries its ISA in
// its symbol, so the linker can never keep an ISA-flagged copy of code that
// baseline code also uses (tests/kernels/test_build_safety.py checks the built
// extension). Kernel headers use no std:: templates for the same reason.
#pragma once
#ifndef SPARSELAB_ISA_NS
#error "kernel headers are included only by csrc/kernels/instantiate_<isa>.cpp, which defines SPARSELAB_ISA_NS"
#endif
