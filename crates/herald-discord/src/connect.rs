//! (being written)

use herald_core::{AdapterContext, AdapterError};
use tokio_util::sync::CancellationToken;

use crate::DiscordSettings;

pub(crate) async fn run(
    _settings: DiscordSettings,
    _ctx: AdapterContext,
    _shutdown: CancellationToken,
) -> Result<(), AdapterError> {
    Err(AdapterError::Other("the Discord adapter is not built yet".into()))
}
