use anyhow::bail;
use clap::Parser;
use event_series::cli::{Cli, Command};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(_) => bail!("`event-series run` is not implemented yet"),
        Command::Crd => bail!("`event-series crd` is not implemented yet"),
    }
}
