package gateway

import (
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The web console: static files under /$console/ (plain HTML, CSS and
// JavaScript, embedded: no build step) and JSON endpoints under
// /$console/api/ that the page calls. The endpoints do what the ATOM API
// and the CLI do, through the same code (the catalog's descriptions,
// Purge, Redrive). docs/gateway.md has the sign-in and its reasons.

//go:embed console
var consoleFiles embed.FS

// consolePrefix is where the console lives. Entity names never start
// with '$', so no entity hides it.
const consolePrefix = "/$console"

// consoleCookie holds the signed-in browser's SAS token.
const consoleCookie = "quorumbus_console"

// consoleSession is how long a sign-in lasts: the token's lifetime.
const consoleSession = time.Hour

// Topology gives the nodes and groups as placement last published them
// (frontend/routing.Router implements it).
type Topology interface {
	Table() *placementpb.RoutingTable
}

func (g *Gateway) serveConsole(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, consolePrefix)
	if !strings.HasPrefix(rest, "/api/") {
		g.serveConsoleFile(w, r, rest)
		return
	}
	api := strings.TrimPrefix(rest, "/api/")
	if r.Method == http.MethodPost && r.Header.Get("X-Quorumbus-Console") == "" {
		// A cross-site form cannot set a header: with SameSite cookies,
		// this keeps another site from acting as the signed-in operator.
		writeJSONError(w, http.StatusForbidden, "console: a POST needs the X-Quorumbus-Console header")
		return
	}
	switch api {
	case "signin":
		g.consoleSignIn(w, r)
		return
	case "signout":
		http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", Path: consolePrefix, MaxAge: -1, HttpOnly: true})
		writeJSON(w, http.StatusOK, map[string]string{})
		return
	}
	if err := g.consoleAuthorize(r); err != nil {
		writeJSONError(w, http.StatusUnauthorized, err.Error())
		return
	}
	g.serveConsoleAPI(w, r, api)
}

func (g *Gateway) serveConsoleFile(w http.ResponseWriter, r *http.Request, rest string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeJSONError(w, http.StatusMethodNotAllowed, "console: only GET")
		return
	}
	name := strings.TrimPrefix(rest, "/")
	if name == "" {
		name = "index.html"
	}
	sub, _ := fs.Sub(consoleFiles, "console")
	data, err := fs.ReadFile(sub, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	switch {
	case strings.HasSuffix(name, ".html"):
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	case strings.HasSuffix(name, ".js"):
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case strings.HasSuffix(name, ".css"):
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	}
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(data)
}

// consoleSignIn checks a SAS rule's name and key by making a token with
// them and validating it exactly as the API validates a request's; when
// it has the Manage right, the token goes into an HttpOnly cookie that
// every console call carries (docs/gateway.md).
func (g *Gateway) consoleSignIn(w http.ResponseWriter, r *http.Request) {
	var in struct {
		KeyName string `json:"keyName"`
		Key     string `json:"key"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil || in.KeyName == "" || in.Key == "" {
		writeJSONError(w, http.StatusBadRequest, "console: sign in with a key name and a key")
		return
	}
	audience := consoleAudience(r)
	token := sas.Sign(in.KeyName, in.Key, audience, g.cfg.Now().Add(consoleSession))
	if err := g.authorizeToken(token, r.Host, "/"); err != nil {
		g.log.Info("console sign-in refused", "keyName", in.KeyName, "err", err)
		writeJSONError(w, http.StatusUnauthorized, err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: consoleCookie, Value: base64.RawURLEncoding.EncodeToString([]byte(token)),
		Path: consolePrefix, MaxAge: int(consoleSession / time.Second),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	writeJSON(w, http.StatusOK, map[string]string{"keyName": in.KeyName})
}

func consoleAudience(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/"
}

// consoleAuthorize checks the console cookie's token (or an Authorization
// header, for scripts) as the API checks a request's.
func (g *Gateway) consoleAuthorize(r *http.Request) error {
	if h := r.Header.Get("Authorization"); h != "" {
		return g.authorizeToken(h, r.Host, "/")
	}
	c, err := r.Cookie(consoleCookie)
	if err != nil {
		return fmt.Errorf("%w: not signed in", ErrNoToken)
	}
	raw, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return fmt.Errorf("%w: the console cookie is not a token", ErrBadToken)
	}
	return g.authorizeToken(string(raw), r.Host, "/")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// errNoMessages: the gateway was built without a Messages backend.
var errNoMessages = errors.New("gateway: reading and moving messages is not configured on this gateway")
