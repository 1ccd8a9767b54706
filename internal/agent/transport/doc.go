// Package transport routes tenancy and OpenBao traffic over the OpenZiti mesh: through the embedded
// SDK (sdk), the loopback `monky-deployd proxy` daemon (proxy, RunProxy), or the OS resolver where
// ziti-edge-tunnel intercepts (system). CheckIdentity is the identity pre-flight doctor shares.
package transport
