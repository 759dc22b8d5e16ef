//! The built-in mock OpenAI-compatible server (`llmsurge mock-server`).
