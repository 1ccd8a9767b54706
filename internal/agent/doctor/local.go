package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
)

// exampleConfig is where the package installs the commented list of every key.
const exampleConfig = "/usr/share/doc/monky-deployd/config.example.yaml"

// aclNote: env-dev-08 applied an ACL fine, then failed every tick when the tunneller rewrote the file.
const aclNote = "an ACL is not enough: ziti-edge-tunnel rewrites the identity on every controller config update and the rewrite drops ACLs"

func (c *checker) config(ctx context.Context) Result {
	env := c.env
	if env.ConfigErr != nil || env.Config == nil {
		err := env.ConfigErr
		if err == nil {
			err = errors.New("no config")
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fail(err.Error(), fmt.Sprintf("re-run install.sh from the install kit (it writes %s), or point --config or MONKY_DEPLOYD_CONFIG at the file", env.ConfigPath))
		case errors.Is(err, fs.ErrPermission):
			return fail(err.Error(), fmt.Sprintf("run doctor as root or as %s; the file should be root:%s 0640", c.agentName(), AgentUser))
		}
		return fail(err.Error(), "correct the key named above (every key and its default: "+exampleConfig+"); an unknown or mistyped key is refused on purpose, so that a typo cannot leave a default in force")
	}
	cfg := env.Config
	summary := fmt.Sprintf("%s loads (env %s, site %s, transport %s)", cfg.Path, cfg.EnvID, orDash(cfg.Site), cfg.Transport)
	if c.asAnotherUser() {
		v, err := c.judgePath(ctx, *env.Agent, cfg.Path, "-r")
		if err == nil && v.Denied != "" {
			return fail(fmt.Sprintf("%s loads for %s, but %s %s", cfg.Path, c.userName(env.Self.UID), env.Agent.Name, v.Denied),
				fmt.Sprintf("chgrp %s %s && chmod 0640 %s", AgentUser, cfg.Path, cfg.Path))
		}
	}
	return ok("%s", summary)
}

func (c *checker) user(context.Context) Result {
	env := c.env
	if env.Agent == nil {
		why := "cannot be looked up"
		if env.AgentErr != nil {
			why = env.AgentErr.Error()
		}
		return fail(fmt.Sprintf("the agent's user %s: %s", c.agentName(), why),
			"install the monky-deployd package (its postinst creates the user), or name the account the agent runs as with --user")
	}
	a := env.Agent
	groups := make([]string, 0, len(a.GIDs))
	for _, g := range a.GIDs {
		groups = append(groups, c.groupName(g))
	}
	detail := fmt.Sprintf("%s (uid %d), groups %s", a.Name, a.UID, strings.Join(groups, ", "))
	if c.asAnotherUser() {
		detail += fmt.Sprintf("; doctor runs as %s, so files are judged by %s's permissions", c.userName(env.Self.UID), a.Name)
	}
	return ok("%s", detail)
}

func (c *checker) identity(ctx context.Context) Result {
	cfg := c.cfg()
	if cfg.Transport == config.TransportSystem {
		return skip("transport system: ziti-edge-tunnel holds the identity and the agent never reads it")
	}
	path := cfg.Identity
	reenrol := fmt.Sprintf("re-enrol this box: `fleetctl onboard %s --reissue` on the operator side, then install.sh --enrol-jwt monky-host.%s.jwt", cfg.EnvID, cfg.EnvID)
	missingFix := fmt.Sprintf("enrol this box's identity: re-run install.sh with the kit's --enrol-jwt monky-host.%s.jwt (a used or expired JWT needs `fleetctl onboard %s --reissue`), or set `identity` in %s", cfg.EnvID, cfg.EnvID, cfg.Path)

	var viaACL []string
	if c.asAnotherUser() {
		v, err := c.judgePath(ctx, *c.env.Agent, path, "-r")
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fail(path+" does not exist", missingFix)
		case err != nil:
			return fail(fmt.Sprintf("cannot look at %s: %v", path, err), lookFix(path))
		case v.Denied != "":
			return fail(fmt.Sprintf("%s %s", c.env.Agent.Name, v.Denied), c.groupFix(path))
		}
		viaACL = v.ViaACL
	}

	err := transport.CheckIdentity(path, c.env.ReadFile)
	var ie *transport.IdentityError
	switch {
	case err == nil:
	case errors.Is(err, transport.ErrIdentityMissing):
		return fail(path+" does not exist", missingFix)
	case errors.Is(err, transport.ErrIdentityUnreadable) && errors.Is(err, fs.ErrPermission):
		return fail(fmt.Sprintf("%s is not readable by %s (uid %d)", path, c.userName(c.env.Self.UID), c.env.Self.UID), c.groupFix(path))
	case errors.As(err, &ie) && errors.Is(err, transport.ErrIdentityUnreadable):
		return fail(path+" "+ie.Reason, lookFix(path))
	case errors.As(err, &ie):
		// Malformed or unusable material: the SDK would exit or panic, the controller name no file.
		return fail(path+" "+ie.Reason, reenrol)
	default:
		return fail(err.Error(), reenrol)
	}
	who := c.userName(c.env.Self.UID)
	if c.asAnotherUser() {
		who = c.env.Agent.Name
	}
	detail := fmt.Sprintf("%s is readable by %s and is a ziti identity with a usable certificate and key", path, who)
	if len(viaACL) > 0 {
		detail += "; the mode bits deny " + strings.Join(viaACL, ", ") + " and only an ACL grants it (see identity-group)"
	}
	return ok("%s", detail)
}

// groupFix is the durable grant: membership of the identity file's group.
func (c *checker) groupFix(path string) string {
	group := "ziti"
	if c.env.Stat != nil {
		if fi, err := c.env.Stat(path); err == nil && fi.GID != 0 {
			group = c.groupName(fi.GID)
		}
	}
	return fmt.Sprintf("usermod -a -G %s %s (the next tick picks it up); %s", group, c.agentName(), aclNote)
}

// identityGroup: the read must rest on the group, which tunneller rewrites keep (ACLs they drop).
func (c *checker) identityGroup(context.Context) Result {
	cfg := c.cfg()
	if cfg.Transport == config.TransportSystem {
		return skip("transport system: ziti-edge-tunnel holds the identity and the agent never reads it")
	}
	path := cfg.Identity
	a := c.env.Agent
	if a == nil {
		return fail("cannot judge without the agent's user (see user)", firstFix("user"))
	}
	fi, err := c.env.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(fmt.Sprintf("cannot check: %s does not exist (see identity)", path), firstFix("identity"))
	case err != nil:
		return fail(fmt.Sprintf("cannot look at %s: %v", path, err), lookFix(path))
	}
	desc := c.describe(fi)
	group := c.groupName(fi.GID)
	switch {
	case fi.UID == a.UID && fi.Mode.Perm()&0o400 != 0:
		return ok("%s is %s: %s owns it", path, desc, a.Name)
	case a.InGroup(fi.GID) && fi.Mode.Perm()&0o040 != 0:
		return ok("%s is %s and %s is in group %s: the read survives a tunneller rewrite", path, desc, a.Name, group)
	case a.InGroup(fi.GID):
		return fail(fmt.Sprintf("%s is %s: its group %s has no read", path, desc, group),
			fmt.Sprintf("chmod g+r %s", path))
	case fi.GID == 0:
		return fail(fmt.Sprintf("%s is %s: group root, so %s's read can only rest on an ACL", path, desc, a.Name),
			fmt.Sprintf("chgrp ziti %s && chmod 0640 %s && usermod -a -G ziti %s; %s", path, path, a.Name, aclNote))
	}
	detail := fmt.Sprintf("%s is not in group %s (%s is %s)", a.Name, group, path, desc)
	if fi.ACL {
		detail += "; today's read rests on an ACL"
	}
	fix := fmt.Sprintf("usermod -a -G %s %s (the next tick picks it up); %s", group, a.Name, aclNote)
	if fi.Mode.Perm()&0o040 == 0 {
		fix = fmt.Sprintf("chmod g+r %s && ", path) + fix
	}
	return fail(detail, fix)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
