package transport

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"
)

// The ziti SDK logs through process-wide logrus and on some faults calls Fatalf (os.Exit), which
// would end the agent with no line in its log. routeSDKLogs sends SDK lines to slog and turns that
// exit into a panic carrying sdkExit, which safeCall recovers; the last Transport built wins.
var (
	sdkLogOnce sync.Once
	sdkLogger  atomic.Pointer[slog.Logger]
	lastFatal  atomic.Pointer[string]
)

// sdkExit is the panic value of the replaced logrus exit function.
type sdkExit struct {
	code int
	msg  string
}

func routeSDKLogs(l *slog.Logger) {
	sdkLogger.Store(l)
	sdkLogOnce.Do(func() {
		std := logrus.StandardLogger()
		// Debug and trace are never produced: the SDK logs session tokens at debug.
		std.SetLevel(logrus.InfoLevel)
		std.SetFormatter(discardFormatter{})
		std.ReplaceHooks(logrus.LevelHooks{})
		std.AddHook(slogHook{})
		std.ExitFunc = func(code int) {
			msg := "no message"
			if p := lastFatal.Load(); p != nil {
				msg = *p
			}
			panic(sdkExit{code: code, msg: msg})
		}
	})
}

// discardFormatter keeps logrus from formatting lines nobody reads; the hook carries them.
type discardFormatter struct{}

func (discardFormatter) Format(*logrus.Entry) ([]byte, error) { return nil, nil }

type slogHook struct{}

func (slogHook) Levels() []logrus.Level { return logrus.AllLevels }

// sdkLevel maps logrus levels one step down: the SDK is chatty about reconnects it handles, and
// the agent's own dial-failed line is what the operator acts on. Fatal and panic stay errors.
func sdkLevel(l logrus.Level) (slog.Level, bool) {
	switch l {
	case logrus.PanicLevel, logrus.FatalLevel:
		return slog.LevelError, true
	case logrus.ErrorLevel:
		return slog.LevelWarn, true
	case logrus.WarnLevel:
		return slog.LevelInfo, true
	case logrus.InfoLevel:
		return slog.LevelDebug, true
	}
	return 0, false
}

// jwtLike matches a JWT (the controller's OIDC tokens) wherever it sits in a message.
var jwtLike = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*\.?[A-Za-z0-9_-]*`)

func (slogHook) Fire(e *logrus.Entry) error {
	if e.Level <= logrus.FatalLevel {
		msg := redactSDK(e.Message)
		lastFatal.Store(&msg)
	}
	l := sdkLogger.Load()
	level, ok := sdkLevel(e.Level)
	if l == nil || !ok {
		return nil
	}
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return nil
	}
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		if secretKey(k) {
			attrs = append(attrs, slog.String(k, "***"))
			continue
		}
		attrs = append(attrs, slog.String(k, redactSDK(fmt.Sprint(e.Data[k]))))
	}
	l.LogAttrs(ctx, level, "ziti sdk: "+redactSDK(e.Message), attrs...)
	return nil
}

func secretKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"token", "jwt", "secret", "password", "key"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

func redactSDK(s string) string { return jwtLike.ReplaceAllString(s, "***") }

// safeCall turns an SDK panic or exit attempt into an error naming what was being done.
func safeCall(what string, f func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		switch v := r.(type) {
		case sdkExit:
			err = fmt.Errorf("%s: the ziti SDK gave up (%s)", what, v.msg)
		case *logrus.Entry:
			err = fmt.Errorf("%s: the ziti SDK panicked: %s", what, redactSDK(v.Message))
		default:
			err = fmt.Errorf("%s: the ziti SDK panicked: %v", what, r)
		}
	}()
	return f()
}
