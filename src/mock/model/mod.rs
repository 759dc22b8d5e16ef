//! The bottom layer of the mock: the simulated server itself, with no HTTP and no wire
//! format in it. `tokenizer` (the mock's words) and `record` (JSON-lines files) sit at
//! the ground; `prefix_cache` counts prompt blocks in words; `plan` draws what each
//! request will do (latency, length, fault, speculative decoding); `stats` counts what
//! the server saw; `truth` writes the `--truth` file from record's lines and stats'
//! fault kinds. Everything above (`api`, `http`) imports from here, never the reverse.

pub mod flow;
pub mod plan;
pub mod prefix_cache;
pub mod record;
pub mod stats;
pub mod tokenizer;
pub mod truth;
