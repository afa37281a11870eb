//! `hkv`: the server.

mod cli;
mod config;
mod values;

use hkv_engine::{Engine, EngineConfig};
use hkv_net::{NetConfig, Server};
use hkv_proto::text::Limits;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use cli::Cli;
use config::Settings;

/// memcached's `-v` levels as log filters: warnings and errors, then information, then
/// every request's detail.
fn log_filter(verbose: u8) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::new(match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    })
}

/// A refused setting or a failed start is the operator's to read: the message and its causes,
/// never a backtrace (anyhow prints one under RUST_BACKTRACE=1, which says nothing here).
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hkv: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::from_env();
    let settings = Settings::from_cli(&cli)?;
    if cli.print_config {
        print!("{}", toml::to_string(&settings)?);
        return Ok(());
    }
    // RUST_LOG, when set, wins over -v and over `verbosity`.
    let from_env = tracing_subscriber::EnvFilter::try_from_default_env().ok();
    let fixed = from_env.is_some();
    let (filter, log_level) = tracing_subscriber::reload::Layer::new(
        from_env.unwrap_or_else(|| log_filter(settings.verbose)),
    );
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Colour codes only for a terminal: a log file or journald gets plain text.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .init();

    memcached_only_flags(&cli)?;
    anyhow::ensure!(
        cli.unix_socket.is_none() || settings.udp_addr(&cli).is_none(),
        "-s turns the network off: -U / --udp-listen cannot go with it"
    );
    anyhow::ensure!(
        cli.unix_mask.is_none() || cli.unix_socket.is_some(),
        "-a sets the permissions of the -s socket: it needs -s"
    );
    // Files are read and paths made absolute before -d changes directory to /.
    let sasl = sasl_users(&cli)?;
    let authfile = auth_file(&cli)?;
    let unix_socket = cli
        .unix_socket
        .as_ref()
        .map(std::path::absolute)
        .transpose()?;
    let pidfile = cli.pidfile.as_ref().map(std::path::absolute).transpose()?;
    let tls = match settings.tls()? {
        Some(t) => {
            if settings.udp_addr(&cli).is_some() {
                tracing::warn!("-Z: UDP requests are not encrypted (memcached's behaviour too)");
            }
            Some(std::sync::Arc::new(
                hkv_net::Tls::load(t).map_err(|e| anyhow::anyhow!("-Z: {e}"))?,
            ))
        }
        None => None,
    };
    if cli.daemon {
        // Nothing has started a thread yet, so forking here is sound. As memcached's -d:
        // stdio goes to /dev/null unless -v asked for logs (`-d -vv 2>>log` keeps them).
        nix::unistd::daemon(false, settings.verbose > 0)?;
    }
    // Before anything can be served: a SIGTERM that comes early is then a clean stop once
    // the server runs (the pid file removed), not the default action's instant death.
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1])?;
    // As memcached: a pid file that cannot be written is reported and the server runs on
    // (refusing to start left `-d` with exit 0 and nothing listening).
    let pidfile =
        pidfile.filter(
            |p| match std::fs::write(p, format!("{}\n", std::process::id())) {
                Ok(()) => true,
                Err(e) => {
                    eprintln!(
                        "hkv: Could not open the pid file {} for writing: {e}",
                        p.display()
                    );
                    false
                }
            },
        );

    // -e: what the last clean stop saved, if anything (read once, then removed).
    let memory_file = match &cli.memory_file {
        Some(path) => {
            let path = std::path::absolute(path)?;
            let image = match hkv_engine::warm::take_image(&path) {
                Ok(image) => image,
                Err(why) => {
                    tracing::error!(file = %path.display(), "warm restart refused, starting empty: {why}");
                    None
                }
            };
            if image.is_none() {
                tracing::info!(file = %path.display(), "memory file: starting empty");
            }
            Some(hkv_engine::warm::MemoryFile { path, image })
        }
        None => None,
    };
    // Before any key is hashed: a per-process seed, so bucket-flooding keys cannot be
    // computed offline (RandomState draws its keys from the OS). A warm restart keeps the
    // seed its items were placed with.
    hkv_engine::set_hash_seed(match memory_file.as_ref().and_then(|m| m.image.as_ref()) {
        Some(image) => image.hash_seed,
        None => {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(std::process::id() as u64);
            h.finish()
        }
    });
    let memory = settings.memory_mb << 20;
    let page_size = settings.page_size();
    let engine = Engine::new(&EngineConfig {
        memory_bytes: memory,
        partitions: settings.partitions() as u32,
        page_size,
        max_value: settings.max_item_size,
        growth_factor: settings.growth_factor,
        backend: settings.backend(),
        schedule: settings.schedule(),
        merge_atomics: settings.merge_atomics,
        zero_copy_min: match settings.zero_copy_min {
            0 => usize::MAX,
            n => n,
        },
        vector_placement: settings.vector_placement(),
        placement: settings.placement(),
        evictions: !cli.disable_evictions,
        cas: !cli.disable_cas,
        memory_file,
        buckets_per_partition: settings.index_buckets_per_partition(),
        ..EngineConfig::default()
    })?;
    engine.set_automove(settings.slab_automove);
    tracing::info!(backends = ?engine.backends(), partitions = engine.partitions(), "engine ready");
    let user = cli.user.clone();
    let server = Server::start_after_bind(
        engine,
        NetConfig {
            listen: settings.addr(),
            extra_listen: settings.extra_addrs(),
            unix_socket: unix_socket.clone(),
            unix_mask: cli.unix_mask.unwrap_or(0o700),
            udp_listen: settings.udp_addr(&cli),
            threads: settings.threads,
            max_connections: settings.max_connections,
            limits: Limits {
                max_item_size: settings.max_item_size,
                cas: !cli.disable_cas,
                max_get_line: settings.max_item_size.max(1 << 20),
                max_line: hkv_proto::MAX_LINE,
                stage_min: hkv_net::STAGE_MIN,
                refuse_unstaged: false,
                body_staged: false,
                sasl: sasl.is_some(),
            },
            enable_shutdown: settings.enable_shutdown,
            verbose: settings.verbose,
            memory_limit: memory,
            growth_factor: settings.growth_factor,
            page_size,
            hashpower_init: settings.hashpower.unwrap_or(0),
            idle_timeout: (settings.idle_timeout > 0)
                .then(|| std::time::Duration::from_secs(settings.idle_timeout.into())),
            conn_buffer_limit: settings.conn_buffer_mb << 20,
            sasl,
            authfile,
            disable_dumping: cli.disable_dumping,
            disable_flush_all: cli.disable_flush_all,
            backlog: cli.listen_backlog,
            reqs_per_event: cli
                .max_reqs_per_event
                .map_or(hkv_net::MAX_REQUESTS_PER_CONN_PASS, |r| r as usize),
            binding: match cli.protocol.as_deref() {
                Some("ascii") => Some(hkv_net::Binding::Ascii),
                Some("binary") => Some(hkv_net::Binding::Binary),
                _ => None,
            },
            admin_listen: cli.admin_listen,
            tls,
            notls: settings.notls_flags(),
            hot: (settings.hot_cache_bytes() > 0).then(|| {
                std::sync::Arc::new(hkv_net::Router::new(
                    settings.hot_cache_bytes(),
                    settings.threads,
                ))
            }),
            hot_epoch: std::time::Duration::from_millis(settings.hot_epoch_ms),
            io: settings.io.parse().map_err(anyhow::Error::msg)?,
            accept: settings.accept.parse().map_err(anyhow::Error::msg)?,
            busy_poll: std::time::Duration::from_micros(settings.busy_poll_us),
            udp_max_wait: std::time::Duration::from_millis(settings.udp_max_wait_ms),
            ..NetConfig::default()
        },
        || match &user {
            Some(user) => drop_privileges(user).map_err(std::io::Error::other),
            None => Ok(()),
        },
    )?;
    // Tests and scripts start hkv on port 0 and read the real address from this line.
    match (server.local_addr(), &unix_socket) {
        (Some(a), _) => println!("hkv listening on {a}"),
        (None, Some(p)) => println!("hkv listening on unix:{}", p.display()),
        (None, None) => {}
    }
    for a in server.extra_addrs() {
        println!("hkv listening on {a}");
    }
    if let Some(udp) = server.udp_addr() {
        println!("hkv udp on {udp}");
    }
    if let Some(admin) = server.admin_addr() {
        println!("hkv admin on {admin}");
    }
    use std::io::Write;
    std::io::stdout().flush()?;
    if let Some(path) = std::env::var_os("MEMCACHED_PORT_FILENAME") {
        // As memcached: a port file that cannot be written is said, and the server serves.
        if let Err(e) = write_port_file(std::path::Path::new(&path), &server) {
            tracing::warn!(path = %std::path::Path::new(&path).display(), error = %e, "cannot write the port file");
        }
    }

    if !fixed {
        server.on_verbosity(move |level| {
            if let Err(e) = log_level.reload(log_filter(level)) {
                tracing::warn!(error = %e, "could not change the log level");
            }
        });
    }
    let stopper = server.stopper();
    let certs = server.refresher();
    let users = server.auth_file();
    std::thread::Builder::new()
        .name("hkv-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == SIGHUP {
                    // memcached rereads its -Y file; hkv also reloads the TLS certificate,
                    // as `refresh_certs` does (new connections get it).
                    if let Some(tls) = &certs {
                        match tls.refresh() {
                            Ok(()) => tracing::info!("SIGHUP: TLS certificate reloaded"),
                            Err(e) => tracing::error!(error = %e, "SIGHUP: TLS certificate not reloaded; the old one stays"),
                        }
                    }
                    if let Some(a) = &users {
                        match a.reload() {
                            Ok(()) => tracing::info!("SIGHUP: -Y auth file reloaded"),
                            Err(e) => tracing::error!(error = %e, "SIGHUP: -Y auth file not reloaded; the old users stay"),
                        }
                    }
                    continue;
                }
                tracing::info!(signal = sig, "stopping");
                if sig == SIGUSR1 {
                    // memcached's graceful stop: with -e, the memory file is saved.
                    stopper.stop_graceful();
                } else {
                    stopper.stop();
                }
                break;
            }
        })?;
    server.wait_then(|engine, graceful| {
        let Some(file) = engine.memory_file() else {
            return;
        };
        if !graceful {
            tracing::warn!(file = %file.display(), "not a graceful stop (SIGUSR1): the memory file is not saved; the next start is empty");
            return;
        }
        match engine.save_memory_file() {
            Ok(s) => tracing::warn!(items = s.items, pages = s.pages, file = %file.display(), "memory file saved for a warm restart"),
            Err(e) => tracing::error!(error = %e, "memory file not saved; the next start is empty"),
        }
    });
    if let Some(p) = &pidfile {
        let _ = std::fs::remove_file(p);
    }
    if let Some(p) = &unix_socket {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

/// `-u`: once the ports are bound, a server started as root runs as `user` (its group,
/// and no supplementary groups). Not root: nothing to drop, as memcached.
fn drop_privileges(user: &str) -> anyhow::Result<()> {
    use nix::unistd::{setgid, setgroups, setuid, Uid, User};
    if !Uid::effective().is_root() {
        tracing::warn!(user, "-u ignored: not running as root");
        return Ok(());
    }
    let u = User::from_name(user)?.ok_or_else(|| anyhow::anyhow!("-u {user}: no such user"))?;
    setgroups(&[u.gid])?;
    setgid(u.gid)?;
    setuid(u.uid)?;
    tracing::info!(user, uid = u.uid.as_raw(), "running as {user}");
    Ok(())
}

/// `-Y`: the users of the text protocol's authentication (the path made absolute, since
/// SIGHUP reads it again after -d has changed directory).
fn auth_file(cli: &Cli) -> anyhow::Result<Option<std::sync::Arc<hkv_net::AuthFile>>> {
    let Some(path) = &cli.auth_file else {
        return Ok(None);
    };
    let path = std::path::absolute(path)?;
    let file = hkv_net::AuthFile::load(&path).map_err(|e| anyhow::anyhow!(e))?;
    Ok(Some(std::sync::Arc::new(file)))
}

/// `-S`: the users from `--sasl-pwdb FILE`, else from the file `MEMCACHED_SASL_PWDB` names
/// (memcached's own password-file mode); an error if neither is given.
fn sasl_users(cli: &Cli) -> anyhow::Result<Option<std::sync::Arc<hkv_net::SaslUsers>>> {
    if !cli.enable_sasl {
        anyhow::ensure!(cli.sasl_pwdb.is_none(), "--sasl-pwdb needs -S");
        return Ok(None);
    }
    let path = cli
        .sasl_pwdb
        .clone()
        .or_else(|| std::env::var_os("MEMCACHED_SASL_PWDB").map(std::path::PathBuf::from))
        .ok_or_else(|| {
            anyhow::anyhow!("-S needs a password file: --sasl-pwdb FILE or MEMCACHED_SASL_PWDB")
        })?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let users =
        hkv_net::SaslUsers::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(Some(std::sync::Arc::new(users)))
}

/// memcached's flags that are about the process rather than the cache: -k and -r applied,
/// the rest accepted with a warning, so memcached's command lines start hkv unchanged.
fn memcached_only_flags(cli: &Cli) -> anyhow::Result<()> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if cli.max_reqs_per_event == Some(0) {
        anyhow::bail!("-R: the number of requests per event must be greater than 0");
    }
    if cli.lock_memory {
        use nix::sys::mman::{mlockall, MlockAllFlags};
        if let Err(e) = mlockall(MlockAllFlags::MCL_CURRENT | MlockAllFlags::MCL_FUTURE) {
            tracing::warn!("-k: mlockall failed ({e}); memory is not locked");
        }
    }
    if cli.enable_coredumps {
        let raised = getrlimit(Resource::RLIMIT_CORE)
            .and_then(|(_, hard)| setrlimit(Resource::RLIMIT_CORE, hard, hard));
        if let Err(e) = raised {
            tracing::warn!("-r: the core file limit could not be raised ({e})");
        }
    }
    let ignored = [
        (cli.enable_largepages, "-L: no meaning in hkv, ignored"),
        (
            cli.slab_min_size.is_some(),
            "-n: no meaning in hkv, ignored",
        ),
        (cli.napi_ids.is_some(), "-N: no meaning in hkv, ignored"),
    ];
    for (_, why) in ignored.iter().filter(|(given, _)| *given) {
        eprintln!("hkv: {why}");
    }
    Ok(())
}

/// memcached's `MEMCACHED_PORT_FILENAME`: the ports bound, one `TCP INET: PORT` (or
/// `UDP`, `INET6`) line per socket, written to NAME.lck and then renamed, so a reader that
/// waits for NAME sees them all (test harnesses and tools find ephemeral ports this way).
fn write_port_file(path: &std::path::Path, server: &hkv_net::Server) -> anyhow::Result<()> {
    let line = |proto: &str, a: std::net::SocketAddr| {
        let family = if a.is_ipv4() { "INET" } else { "INET6" };
        format!("{proto} {family}: {}\n", a.port())
    };
    let mut text = String::new();
    for a in server
        .local_addr()
        .into_iter()
        .chain(server.extra_addrs().iter().copied())
    {
        text.push_str(&line("TCP", a));
    }
    if let Some(a) = server.udp_addr() {
        text.push_str(&line("UDP", a));
    }
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lck");
    std::fs::write(&lock, text)?;
    std::fs::rename(&lock, path)?;
    Ok(())
}
