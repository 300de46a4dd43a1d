//! Tools for strongsync's benchmarks (`bench/run`): a TCP relay that adds a fixed delay in each
//! direction, standing in for the distance between replicas and their primary where the kernel
//! has no `tc netem`.

pub mod relay;
