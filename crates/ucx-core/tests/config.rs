//! Context configuration: options by name, precedence of the environment, the effective map.
use ucx_core::*;

#[test]
fn options_and_effective_config() {
    let ctx = Context::builder().option("TLS", "tcp,self").option("NET_DEVICES", "lo").build().unwrap();
    assert_eq!(ctx.config()["TLS"], "tcp,self");
    assert_eq!(ctx.config()["NET_DEVICES"], "lo");
    assert!(ctx.config().len() > 20, "the whole configuration, not only what we set");
    assert!(ctx.features().contains(Features::TAG | Features::WAKEUP));
}

#[test]
fn unknown_option_is_an_error_naming_it() {
    // UCX 1.18 still accepted unknown names silently (keeping them for transports); 1.22
    // rejects them, and then the error names the option.
    if version::runtime().unwrap() >= (1, 22, 0) {
        let e = Context::builder().option("NOT_AN_OPTION", "1").build().unwrap_err();
        assert!(e.to_string().contains("NOT_AN_OPTION"), "{e}");
    }
    let e = Context::builder().option("RNDV_THRESH", "lots").build().unwrap_err();
    assert!(e.to_string().contains("RNDV_THRESH=lots"), "{e}");
}

#[test]
fn a_failed_init_carries_ucx_reason() {
    // UCX logs which name was bad and which are valid, and returns only "No such device".
    let e = Context::builder().option("TLS", "bogus").build().unwrap_err();
    assert_eq!(e.status(), Status::NoDevice);
    let text = e.to_string();
    if cfg!(target_arch = "x86_64") {
        assert!(text.contains("transport 'bogus' is not available") && text.contains("tcp"), "{text}");
    }
    let e = Context::builder().option("TLS", "tcp").option("NET_DEVICES", "nosuchnic0").build().unwrap_err();
    if cfg!(target_arch = "x86_64") {
        assert!(e.to_string().contains("nosuchnic0"), "{e}");
    }
    // A good context after failed ones: the capture handler is gone, nothing is kept.
    Context::builder().option("NET_DEVICES", "lo").build().unwrap();
}

#[test]
fn environment_or_options_win_as_asked() {
    // This test binary's only test touching UCX_SEG_SIZE, so setting it is race-free.
    std::env::set_var("UCX_SEG_SIZE", "16k");
    let options_win = Context::builder().option("SEG_SIZE", "32k").build().unwrap();
    assert_eq!(options_win.config()["SEG_SIZE"], "32K");
    let env_wins = Context::builder().option("SEG_SIZE", "32k").env_takes_precedence(true).build().unwrap();
    assert_eq!(env_wins.config()["SEG_SIZE"], "16K");
    std::env::remove_var("UCX_SEG_SIZE");
}

#[test]
fn versions() {
    // The library serves the headers' API: same major, no older minor (the shipped bindings are
    // UCX 1.18's, the wheel is newer).
    let (major, minor, _) = version::runtime().unwrap();
    assert_eq!(major, version::HEADERS.0);
    assert!((major, minor) >= version::HEADERS, "UCX {major}.{minor} under headers {:?}", version::HEADERS);
    assert!(version::HEADERS >= version::MIN_SUPPORTED);
}

#[test]
fn library_defaults_apply_only_where_the_user_chose_nothing() {
    // Every default reaches UCX (a name or value it refused would fail the build) and shows
    // in `setting`, unless this process's environment chose the variable.
    let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
    let defaults = library_defaults();
    assert!(defaults.len() > LIBRARY_DEFAULTS.len(), "the peer timeout's settings too: {defaults:?}");
    for (name, value) in defaults {
        match std::env::var(format!("UCX_{name}")) {
            Ok(env) => assert_eq!(ctx.setting(name), Some(env.as_str()), "{name}"),
            Err(_) => assert_eq!(ctx.setting(name), Some(value.as_str()), "{name}"),
        }
    }
    assert!(LIBRARY_DEFAULTS.contains(&("TCP_CONN_NB", "y")), "non-blocking connects (docs/configuration.md)");
    // The builder's option wins over a default.
    let ctx = Context::builder().option("NET_DEVICES", "lo").option("TCP_CONN_NB", "n").build().unwrap();
    assert_eq!(ctx.setting("TCP_CONN_NB"), Some("n"));
    // This test binary's only test touching UCX_TCP_CONN_NB, so setting it is race-free: the
    // environment wins over a default too.
    std::env::set_var("UCX_TCP_CONN_NB", "n");
    let ctx = Context::builder().option("NET_DEVICES", "lo").build();
    std::env::remove_var("UCX_TCP_CONN_NB");
    assert_eq!(ctx.unwrap().setting("TCP_CONN_NB"), Some("n"));
}

#[test]
fn a_silent_peer_is_noticed_within_30_s_by_default() {
    // The default (docs/configuration.md has its measurement) and the UCX settings it becomes
    // where UCXA_PEER_TIMEOUT is unset (set, it is the test run's choice).
    assert_eq!(peer_timeout::DEFAULT, std::time::Duration::from_secs(30));
    if std::env::var_os(peer_timeout::VARIABLE).is_some() {
        return;
    }
    let defaults = library_defaults();
    for (name, value) in [
        ("TCP_KEEPIDLE", "inf"),
        ("KEEPALIVE_INTERVAL", "3750ms"),
        ("KEEPALIVE_NUM_EPS", "inf"),
        ("TCP_USER_TIMEOUT", "15000ms"),
    ] {
        assert!(defaults.iter().any(|(n, v)| *n == name && v == value), "{name}={value} in {defaults:?}");
    }
    // UCX takes each of them (a name or value it refused would fail the build).
    let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
    if std::env::var_os("UCX_TCP_USER_TIMEOUT").is_none() {
        assert_eq!(ctx.setting("TCP_USER_TIMEOUT"), Some("15000ms"));
    }
}
