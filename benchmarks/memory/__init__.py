"""Memory of a train step: per device under spatial partitioning, and the activations kept
for the backward pass with and without gradient checkpointing (compiled, never run)."""
