"""Program analysis of training scripts, on libcst: one answer to each question that
propagation, the instrumenter and replay planning ask of a script (which names are surely
bound where, a scope's names, which calls only read, what a statement changes, which names
a loop carries from one iteration to the next)."""
