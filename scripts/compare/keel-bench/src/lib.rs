//! Keel vs LangChain benchmark harness; the benchmarks are in `benches/vs_langchain.rs`.
