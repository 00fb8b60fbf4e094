// Command mockoidc-server runs github.com/oauth2-proxy/mockoidc as a process,
// a real (if minimal) OIDC provider for the sign-in tests. It listens on
// loopback only (or, for the local node, inside its network namespace on an
// address of 198.18.0.0/15), prints one JSON line with its endpoints once ready, and stops
// on SIGTERM, SIGINT or when its stdin closes (so it dies with the test that
// spawned it; pass -watch-stdin=false when stdin is /dev/null).
//
// A second loopback listener (-admin-listen) takes the user of the next sign-in:
//
//	POST /queue-user {"subject":"u1","email":"u1@example.com",
//	                  "preferred_username":"u1","groups":["g1","g2"]}
//
// ("email_verified" defaults to true). `POST /queue-user?only=true` empties the
// queue first, so a sign-in an earlier test left unfinished cannot hand its
// user to the next one. With an empty queue mockoidc signs in
// its DefaultUser (jane.doe@example.com, groups engineering and design).
// mockoidc puts email only in tokens for the "email" scope, preferred_username
// for "profile" and groups for "groups".
//
// Two additions on the token endpoint, both logged on stderr per request:
//   - client_secret_basic, which mockoidc's discovery document advertises but
//     its handler does not read (it only reads the form): HTTP basic
//     credentials are copied into the form;
//   - -public-client: a token request without client_secret is accepted
//     (PKCE is still checked when the authorize request carried a challenge).
//
// Two mockoidc quirks for test writers: its token response's expires_in is a
// Go Duration in nanoseconds (clients read an expiry decades ahead, so refresh
// only happens through the client's own refresh period), and its session store
// has no lock (drive one sign-in at a time).
//
// The oauth2-proxy binary comes from the same module (tools.go pins it).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/oauth2-proxy/mockoidc"
)

const mockoidcModule = "github.com/oauth2-proxy/mockoidc"

// source identifies this program's sources; hack/local-cluster.sh sets it to a
// digest of main.go, go.mod and go.sum, and rebuilds when -version differs.
var source = "dev"

// ready is the JSON line printed on stdout once both listeners accept.
type ready struct {
	Issuer                string `json:"issuer"`
	ClientID              string `json:"client_id"`
	ClientSecret          string `json:"client_secret"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
	JWKSURI               string `json:"jwks_uri"`
	UserinfoEndpoint      string `json:"userinfo_endpoint"`
	DiscoveryEndpoint     string `json:"discovery_endpoint"`
	AdminURL              string `json:"admin_url"`
}

// queuedUser is the admin endpoint's request body.
type queuedUser struct {
	Subject           string   `json:"subject"`
	Email             string   `json:"email"`
	EmailVerified     *bool    `json:"email_verified"`
	PreferredUsername string   `json:"preferred_username"`
	Groups            []string `json:"groups"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address of the OIDC endpoints (loopback, or the local node's network)")
	adminListen := flag.String("admin-listen", "127.0.0.1:0", "address of the admin endpoint (loopback, or the local node's network)")
	clientID := flag.String("client-id", "tinycode", "the one client's id")
	clientSecret := flag.String("client-secret", "tinycode-secret", "the one client's secret")
	publicClient := flag.Bool("public-client", false, "accept token requests without client_secret")
	watchStdin := flag.Bool("watch-stdin", true, "exit when stdin reaches end of file")
	showVersion := flag.Bool("version", false, "print the mockoidc module version and exit")
	flag.Parse()
	log.SetPrefix("mockoidc-server: ")
	log.SetFlags(0)

	if *showVersion {
		fmt.Printf("mockoidc-server %s (%s %s)\n", source, mockoidcModule, moduleVersion(mockoidcModule))
		return
	}

	ln := listenLocal(*listen)
	adminLn := listenLocal(*adminListen)

	m, err := mockoidc.NewServer(nil) // a fresh RSA key per run
	if err != nil {
		log.Fatal(err)
	}
	m.ClientID, m.ClientSecret = *clientID, *clientSecret
	if err := m.AddMiddleware(tokenClientAuth(m, *publicClient)); err != nil {
		log.Fatal(err)
	}
	if err := m.Start(ln, nil); err != nil {
		log.Fatal(err)
	}

	admin := http.NewServeMux()
	admin.HandleFunc("POST /queue-user", func(w http.ResponseWriter, r *http.Request) {
		var u queuedUser
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&u); err != nil || u.Subject == "" {
			http.Error(w, "want JSON {subject, email, preferred_username, groups}", http.StatusBadRequest)
			return
		}
		verified := u.EmailVerified == nil || *u.EmailVerified
		if r.URL.Query().Get("only") == "true" {
			m.UserQueue.Lock()
			m.UserQueue.Queue = nil
			m.UserQueue.Unlock()
		}
		m.QueueUser(&mockoidc.MockUser{Subject: u.Subject, Email: u.Email, EmailVerified: verified,
			PreferredUsername: u.PreferredUsername, Groups: u.Groups})
		log.Printf("queued user %q", u.Subject)
		w.WriteHeader(http.StatusNoContent)
	})
	go func() {
		if err := http.Serve(adminLn, admin); err != nil {
			log.Fatal(err)
		}
	}()

	line, _ := json.Marshal(ready{
		Issuer: m.Issuer(), ClientID: m.ClientID, ClientSecret: m.ClientSecret,
		AuthorizationEndpoint: m.AuthorizationEndpoint(), TokenEndpoint: m.TokenEndpoint(),
		JWKSURI: m.JWKSEndpoint(), UserinfoEndpoint: m.UserinfoEndpoint(),
		DiscoveryEndpoint: m.DiscoveryEndpoint(), AdminURL: "http://" + adminLn.Addr().String(),
	})
	fmt.Println(string(line))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	if *watchStdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop <- syscall.SIGHUP // stands for "stdin closed"
		}()
	}
	<-stop
	_ = m.Shutdown()
}

// nodeRange is the local node's network (hack/lib/node.sh): addresses that
// exist only inside the network namespace the node's script creates.
var nodeRange = netip.MustParsePrefix("198.18.0.0/15")

// listenLocal listens on addr, which must be a loopback IP and port or one in
// the local node's network.
func listenLocal(addr string) net.Listener {
	host, _, err := net.SplitHostPort(addr)
	ip, perr := netip.ParseAddr(host)
	if err != nil || perr != nil || !(ip.IsLoopback() || nodeRange.Contains(ip)) {
		log.Fatalf("%q is neither a loopback IP:port nor one in the local node's network %s", addr, nodeRange)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	return ln
}

// tokenClientAuth logs each request and, on the token endpoint, moves HTTP
// basic client credentials into the form (where mockoidc looks) and, for a
// public client, supplies the missing client_secret.
func tokenClientAuth(m *mockoidc.MockOIDC, public bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != mockoidc.TokenEndpoint {
				log.Printf("%s %s", r.Method, r.URL.Path)
				next.ServeHTTP(w, r)
				return
			}
			if err := r.ParseForm(); err != nil { // mockoidc's ParseForm is then a no-op
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			auth := "none"
			if user, pass, ok := r.BasicAuth(); ok {
				auth = "client_secret_basic"
				// RFC 6749 2.3.1: both parts are form-urlencoded before encoding.
				id, err1 := url.QueryUnescape(user)
				secret, err2 := url.QueryUnescape(pass)
				if err := errors.Join(err1, err2); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				r.Form.Set("client_id", id)
				r.Form.Set("client_secret", secret)
			} else if r.PostForm.Get("client_secret") != "" {
				auth = "client_secret_post"
			}
			if public && r.Form.Get("client_secret") == "" {
				auth += " (public client)"
				r.Form.Set("client_secret", m.ClientSecret)
			}
			log.Printf("%s %s grant_type=%s client_auth=%s", r.Method, r.URL.Path,
				r.PostForm.Get("grant_type"), auth)
			next.ServeHTTP(w, r)
		})
	}
}

// moduleVersion is the version of a dependency this binary was built with.
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == path {
				return dep.Version
			}
		}
	}
	return "unknown"
}
