//! Wiring the store to the agent: the model provider from the config; the built-in tools over
//! the store and the conversions between stored and agent messages come from the gateway.

use std::time::Duration;

use herald_agent::{OpenAiProvider, RetryPolicy};
pub use herald_gateway::history::{StoreHistory, to_agent, to_store, tools, usage};

use crate::config::{self, Config};

/// The real provider for `[model]`, with the key from the variable `api_key_env` names.
///
/// A missing key is fine for a local server; for OpenAI's own endpoint it can only fail, so it
/// is refused up front with what to configure.
pub fn provider(config: &Config) -> Result<OpenAiProvider, NoModel> {
    let model = &config.model;
    let key = config::resolve(&model.api_key_env).ok().map(|s| s.expose().to_owned());
    if key.is_none() && model.base_url.contains("api.openai.com") {
        return Err(NoModel::NoKey { var: model.api_key_env.clone() });
    }
    let timeout = Duration::from_secs(model.request_timeout_s);
    OpenAiProvider::new(&model.base_url, key, timeout, RetryPolicy::default())
        .map_err(|e| NoModel::Client(e.to_string()))
}

/// No model can be reached with this configuration.
#[derive(Debug, thiserror::Error)]
pub enum NoModel {
    /// OpenAI's endpoint without a key.
    #[error(
        "no model is configured: set {var} to an OpenAI API key, or point [model] base_url at any \
         OpenAI-compatible server (a local one needs no key; see the README's offline trial)"
    )]
    NoKey {
        /// The variable that would hold the key.
        var: String,
    },
    /// The HTTP client could not be set up (TLS roots, for one).
    #[error("{0}")]
    Client(String),
}
