//! The automation engine (issue 11, DESIGN.md "Automation engine"). So far only the signal
//! matcher exists; evaluation on ingested events, runs, the processor and deliveries are still
//! to be built on it.

pub mod matching;
