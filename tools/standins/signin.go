package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// runSignin is a browser's sign-in, reduced to what the tests assert on:
//
//	standin signin -service URL -host HOST -queue URL -email EMAIL [PATH]
//
// It tells the OIDC stand-in (mockoidc-server's admin endpoint, -queue) who
// signs in next, then requests PATH of the instance the way its Route or
// Ingress would hand it on: to the instance's Service (-service), with the
// instance's host and https in the forwarding headers. It follows the
// redirects to the provider and back to the instance's callback, keeping
// the instance's cookies, and prints one JSON object: every hop (status and
// where it was sent) and the final answer's status and body.
func runSignin(args []string) error {
	fs := flag.NewFlagSet("signin", flag.ContinueOnError)
	service := fs.String("service", "", "the instance's Service, http://name.namespace.svc:port")
	host := fs.String("host", "", "the instance's public host (status.url without https://)")
	queue := fs.String("queue", "", "the OIDC stand-in's queue-user URL")
	email := fs.String("email", "", "who signs in")
	retryFor := fs.Duration("retry-for", 25*time.Second, "keep trying the first request this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	path := "/"
	if fs.NArg() == 1 {
		path = fs.Arg(0)
	}
	if *service == "" || *host == "" || *queue == "" || *email == "" || fs.NArg() > 1 {
		return errors.New("usage: standin signin -service URL -host HOST -queue URL -email EMAIL [PATH]")
	}
	svc, err := url.Parse(*service)
	if err != nil {
		return fmt.Errorf("-service: %w", err)
	}

	user, _ := json.Marshal(map[string]any{
		"subject": "sub-" + *email, "email": *email, "preferred_username": *email, "groups": []string{"node-devs"},
	})
	client := &http.Client{
		Timeout: 5 * time.Second,
		// Redirects are followed by hand: the instance's are sent to its Service.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Post(*queue, "application/json", bytes.NewReader(user))
	if err != nil {
		return fmt.Errorf("queue the user: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("queue the user: status %d", resp.StatusCode)
	}

	type hop struct {
		URL      string `json:"url"`
		Status   int    `json:"status"`
		Location string `json:"location,omitempty"`
	}
	var hops []hop
	cookies := map[string]string{} // the instance's, name to value
	next := "https://" + *host + path
	deadline := time.Now().Add(*retryFor)
	for i := 0; ; i++ {
		if i == 8 {
			return fmt.Errorf("more than 8 redirects: %v", hops)
		}
		target, err := url.Parse(next)
		if err != nil {
			return fmt.Errorf("redirect to %q: %w", next, err)
		}
		req, err := http.NewRequest(http.MethodGet, next, nil)
		if err != nil {
			return err
		}
		ours := target.Host == *host
		if ours {
			// As the router hands it on: to the Service, the public host and
			// scheme in the forwarding headers.
			req.URL.Scheme, req.URL.Host = svc.Scheme, svc.Host
			req.Host = *host
			req.Header.Set("X-Forwarded-Host", *host)
			req.Header.Set("X-Forwarded-Proto", "https")
			var pairs []string
			for k, v := range cookies {
				pairs = append(pairs, k+"="+v)
			}
			if len(pairs) > 0 {
				req.Header.Set("Cookie", strings.Join(pairs, "; "))
			}
		}
		resp, err := client.Do(req)
		if err != nil {
			// NetworkPolicy admits a new pod a moment after it starts.
			if i == 0 && time.Now().Before(deadline) {
				i--
				time.Sleep(500 * time.Millisecond)
				continue
			}
			return fmt.Errorf("GET %s: %w", next, err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if ours {
			for _, c := range resp.Cookies() {
				if c.MaxAge < 0 || c.Value == "" {
					delete(cookies, c.Name)
				} else {
					cookies[c.Name] = c.Value
				}
			}
		}
		location := resp.Header.Get("Location")
		hops = append(hops, hop{URL: next, Status: resp.StatusCode, Location: location})
		if resp.StatusCode/100 != 3 || location == "" {
			out, _ := json.Marshal(map[string]any{"hops": hops, "status": resp.StatusCode, "body": string(body)})
			fmt.Println(string(out))
			return nil
		}
		ref, err := target.Parse(location)
		if err != nil {
			return fmt.Errorf("Location %q: %w", location, err)
		}
		next = ref.String()
	}
}
