//! `reconciled status`: a running host's guests, as a table or as the raw `/status` document.

use std::net::SocketAddr;

use clap::Args;

/// `reconciled status`.
#[derive(Args)]
pub(crate) struct StatusArgs {
    /// Where the host listens (its --listen).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Print the raw JSON document.
    #[arg(long)]
    json: bool,
}

/// Prints the host's status.
pub(crate) async fn status(args: StatusArgs) -> anyhow::Result<()> {
    if args.json {
        // As served, unparsed: it also works against a host whose document this version
        // cannot read.
        let (code, body) = reconciled::ops::http::get(args.addr, "/status").await?;
        if code != 200 {
            anyhow::bail!("{} answered /status with {code}: {body}", args.addr);
        }
        print!("{body}");
        return Ok(());
    }
    print!(
        "{}",
        reconciled::ops::http::get_status(args.addr).await?.table()
    );
    Ok(())
}
