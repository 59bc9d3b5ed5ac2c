// A real OCI registry on loopback for the test suite, with TLS and basic auth, and a client that
// pulls a wasm artifact with go-containerregistry (crane) to prove that what `reconciled push`
// publishes is an ordinary OCI artifact.
//
//	registry serve -cert c.pem -key k.pem -user u -password p [-referrers=false]
//	registry pull -ca ca.pem -user u -password p -ref 127.0.0.1:5000/repo:tag -out m.wasm
//
// `serve` prints "listening on <addr>" on stdout once it accepts connections, and stops when
// its stdin closes, so a test that dies never leaves it behind.
package main

import (
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: registry serve|pull [flags]")
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2:])
	case "pull":
		pull(os.Args[2:])
	default:
		log.Fatalf("unknown command %q: serve or pull", os.Args[1])
	}
}

func serve(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	cert := fs.String("cert", "", "serving certificate (PEM)")
	key := fs.String("key", "", "serving key (PEM)")
	user := fs.String("user", "", "the one user allowed")
	password := fs.String("password", "", "its password")
	referrers := fs.Bool("referrers", true, "serve the OCI 1.1 referrers API (else 404, as older registries)")
	_ = fs.Parse(args)

	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatalf("serving certificate: %v", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("listen %s: %v", *addr, err)
	}
	tlsLn := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(*referrers))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(*user)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(*password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="reconciled-test"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
			return
		}
		reg.ServeHTTP(&locating{ResponseWriter: w, r: r}, r)
	})
	fmt.Printf("listening on %s\n", ln.Addr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	// TLS handshake failures are what the tests provoke on purpose (an untrusted CA).
	srv := &http.Server{Handler: handler, ErrorLog: log.New(io.Discard, "", 0)}
	log.Fatal(srv.Serve(tlsLn))
}

// locating adds the Location header go-containerregistry's registry leaves out of a 201 for a
// finished blob upload or a pushed manifest. The OCI distribution spec requires it there
// ("Location: <blob-location>"), and clients that follow the spec (oci-client) refuse a 201
// without one.
type locating struct {
	http.ResponseWriter
	r *http.Request
}

func (l *locating) WriteHeader(code int) {
	if code == http.StatusCreated && l.Header().Get("Location") == "" {
		if loc := location(l.r); loc != "" {
			l.Header().Set("Location", loc)
		}
	}
	l.ResponseWriter.WriteHeader(code)
}

// location is where what r created can be fetched: /v2/<name>/blobs/<digest> or
// /v2/<name>/manifests/<reference>.
func location(r *http.Request) string {
	p := r.URL.Path
	if i := strings.Index(p, "/blobs/uploads/"); i >= 0 {
		if d := r.URL.Query().Get("digest"); d != "" {
			return p[:i] + "/blobs/" + d
		}
	}
	if strings.Contains(p, "/manifests/") {
		return p
	}
	return ""
}

func pull(args []string) {
	fs := flag.NewFlagSet("pull", flag.ExitOnError)
	ca := fs.String("ca", "", "CA certificate (PEM) the registry's certificate chains to")
	user := fs.String("user", "", "user")
	password := fs.String("password", "", "password")
	ref := fs.String("ref", "", "registry/repository:tag or @digest")
	out := fs.String("out", "", "where to write the wasm layer")
	_ = fs.Parse(args)

	pem, err := os.ReadFile(*ca)
	if err != nil {
		log.Fatalf("CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatalf("CA %s holds no certificate", *ca)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	opts := []crane.Option{
		crane.WithTransport(tr),
		crane.WithAuth(&authn.Basic{Username: *user, Password: *password}),
	}
	raw, err := crane.Manifest(*ref, opts...)
	if err != nil {
		log.Fatalf("manifest of %s: %v", *ref, err)
	}
	var m struct {
		MediaType    string `json:"mediaType"`
		ArtifactType string `json:"artifactType"`
		Config       struct {
			MediaType string `json:"mediaType"`
		} `json:"config"`
		Layers []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		log.Fatalf("manifest of %s: %v", *ref, err)
	}
	if len(m.Layers) != 1 {
		log.Fatalf("manifest of %s has %d layers, not 1", *ref, len(m.Layers))
	}
	repo, err := crane.PullLayer(repository(*ref)+"@"+m.Layers[0].Digest, opts...)
	if err != nil {
		log.Fatalf("layer of %s: %v", *ref, err)
	}
	rc, err := repo.Compressed()
	if err != nil {
		log.Fatalf("layer of %s: %v", *ref, err)
	}
	defer rc.Close()
	f, err := os.Create(*out)
	if err != nil {
		log.Fatalf("%s: %v", *out, err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		log.Fatalf("%s: %v", *out, err)
	}
	if err := f.Close(); err != nil {
		log.Fatalf("%s: %v", *out, err)
	}
	// What the test checks: the artifact's types, as crane read them.
	fmt.Printf("%s %s %s %s\n", m.MediaType, m.Config.MediaType, m.Layers[0].MediaType, m.Layers[0].Digest)
}

// repository is ref without its tag or digest.
func repository(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	slash := strings.LastIndex(ref, "/")
	if colon := strings.LastIndex(ref, ":"); colon > slash {
		return ref[:colon]
	}
	return ref
}
