// Package transport is how monky-deployd reaches tenancy and OpenBao over the OpenZiti mesh: one
// Transport whose *http.Transport routes host:port either through the embedded ziti SDK (sdk),
// through the loopback `monky-deployd proxy` daemon (proxy), or straight to the OS resolver where
// ziti-edge-tunnel intercepts (system). RunProxy is that daemon, and CheckIdentity is the identity
// file pre-flight that `doctor` shares with the sdk transport.
package transport
