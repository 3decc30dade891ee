// Command bench-ceiling binds the pending pods of one schedulerName, in every
// namespace as the schedulers it is compared with watch them, to the node
// their required node affinity names, with no decision at all and no
// client-side rate limit. It is the Go one of `make bench`'s two bare binders
// (bench/bare_binder.py is the Python one); the faster of the two in a round is
// that round's ceiling: what the apiserver and etcd of this machine allow any
// scheduler. One HTTP/1.1 connection per worker binds faster here than HTTP/2
// streams over one connection (measured: ~480 vs ~330 binds/s on 2 cores),
// so that is the default. Only the standard library is used, so it builds in
// seconds.
//
// No decision, but no pod lost: a binding that failed without proving the pod
// has a node (no answer, 429, 5xx, or a 409 that is not "already assigned":
// etcd failing mid-write answers 409 too) is posted again after retryDelay.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// ReadyLine is printed once the first list is done: from then on no pod is missed.
const ReadyLine = "ceiling binder ready"

// How the apiserver says that a pod has a node already (the only 409 that means "done").
const alreadyAssigned = "is already assigned to node"

const retryDelay = 100 * time.Millisecond

// finished says whether a binding's answer ends the pod's binding: bound, already bound, or gone.
func finished(status int, body []byte) bool {
	switch status {
	case 200, 201, 404:
		return true
	case 409:
		return strings.Contains(string(body), alreadyAssigned)
	}
	return false
}

type pod struct {
	Metadata struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		UID       string `json:"uid"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
		Affinity struct {
			NodeAffinity struct {
				Required struct {
					Terms []struct {
						MatchFields []struct {
							Values []string `json:"values"`
						} `json:"matchFields"`
					} `json:"nodeSelectorTerms"`
				} `json:"requiredDuringSchedulingIgnoredDuringExecution"`
			} `json:"nodeAffinity"`
		} `json:"affinity"`
	} `json:"spec"`
}

// pinnedNode is the node of the pod's first matchFields term (how the bench pins its pods).
func (p *pod) pinnedNode() string {
	for _, term := range p.Spec.Affinity.NodeAffinity.Required.Terms {
		for _, field := range term.MatchFields {
			if len(field.Values) > 0 {
				return field.Values[0]
			}
		}
	}
	return ""
}

type binder struct {
	client   *http.Client
	server   string
	token    string
	selector string
	queue    chan *pod
	queued   map[string]bool // uids; touched by the watch goroutine only
}

func (b *binder) do(method, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequest(method, b.server+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.client.Do(req)
}

func (b *binder) offer(p *pod) {
	if p.Spec.NodeName != "" || b.queued[p.Metadata.UID] {
		return
	}
	node := p.pinnedNode()
	if node == "" {
		log.Printf("pod %s has no matchFields node affinity; skipped", p.Metadata.Name)
		return
	}
	b.queued[p.Metadata.UID] = true
	b.queue <- p
}

func (b *binder) bindLoop() {
	for p := range b.queue {
		body, _ := json.Marshal(map[string]any{
			"apiVersion": "v1", "kind": "Binding",
			"metadata": map[string]string{"name": p.Metadata.Name, "uid": p.Metadata.UID},
			"target":   map[string]string{"apiVersion": "v1", "kind": "Node", "name": p.pinnedNode()},
		})
		path := fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/binding", url.PathEscape(p.Metadata.Namespace), url.PathEscape(p.Metadata.Name))
		resp, err := b.do("POST", path, body)
		status, msg := 0, []byte(fmt.Sprint(err))
		if err == nil {
			msg, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		}
		if !finished(status, msg) {
			log.Printf("bind %s/%s: HTTP %d %.200s; again", p.Metadata.Namespace, p.Metadata.Name, status, msg)
			go func(p *pod) { time.Sleep(retryDelay); b.queue <- p }(p)
		}
	}
}

// listAndWatch offers every pending pod, then every one the watch reports, until the watch ends.
func (b *binder) listAndWatch(announce func()) error {
	path := "/api/v1/pods"
	resp, err := b.do("GET", path+"?"+url.Values{"fieldSelector": {b.selector}}.Encode(), nil)
	if err != nil {
		return err
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []pod `json:"items"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("list: HTTP %d: %w", resp.StatusCode, err)
	}
	for i := range list.Items {
		b.offer(&list.Items[i])
	}
	announce()
	query := url.Values{"fieldSelector": {b.selector}, "watch": {"1"}, "allowWatchBookmarks": {"true"},
		"resourceVersion": {list.Metadata.ResourceVersion}, "timeoutSeconds": {"300"}}
	resp, err = b.do("GET", path+"?"+query.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("watch: HTTP %d %.300s", resp.StatusCode, msg)
	}
	decoder := json.NewDecoder(resp.Body)
	for {
		var event struct {
			Type   string `json:"type"`
			Object pod    `json:"object"`
		}
		if err := decoder.Decode(&event); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		if event.Type == "ADDED" || event.Type == "MODIFIED" {
			b.offer(&event.Object)
		}
	}
}

func tlsConfig(caFile, certFile, keyFile string, insecure bool) (*tls.Config, error) {
	config := &tls.Config{InsecureSkipVerify: insecure}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		config.RootCAs = x509.NewCertPool()
		config.RootCAs.AppendCertsFromPEM(pem)
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config, nil
}

func transport(config *tls.Config, http2 bool, workers int) *http.Transport {
	t := &http.Transport{TLSClientConfig: config, ForceAttemptHTTP2: http2, MaxIdleConnsPerHost: workers + 2}
	if !http2 {
		// A non-nil empty map is how net/http is told not to negotiate HTTP/2.
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return t
}

func main() {
	server := flag.String("server", "", "apiserver URL, e.g. https://127.0.0.1:16443")
	caFile := flag.String("ca-file", "", "CA bundle that signed the apiserver's certificate")
	certFile := flag.String("client-cert-file", "", "client certificate (PEM)")
	keyFile := flag.String("client-key-file", "", "client key (PEM)")
	token := flag.String("token", "", "bearer token, when the kubeconfig has one")
	insecure := flag.Bool("insecure-skip-tls-verify", false, "do not verify the apiserver's certificate")
	schedulerName := flag.String("scheduler-name", "", "bind the pods whose spec.schedulerName is this")
	workers := flag.Int("workers", 16, "bindings posted at once")
	http2 := flag.Bool("http2", false, "one multiplexed HTTP/2 connection instead of one HTTP/1.1 connection per worker")
	flag.Parse()
	if *server == "" || *schedulerName == "" {
		log.Fatal("--server and --scheduler-name are required")
	}
	config, err := tlsConfig(*caFile, *certFile, *keyFile, *insecure)
	if err != nil {
		log.Fatalf("TLS: %v", err)
	}
	b := &binder{
		client: &http.Client{Transport: transport(config, *http2, *workers)},
		server: *server, token: *token,
		selector: "spec.schedulerName=" + *schedulerName + ",spec.nodeName=",
		queue:    make(chan *pod, 100000), queued: map[string]bool{},
	}
	for i := 0; i < *workers; i++ {
		go b.bindLoop()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	go func() { <-stop; os.Exit(0) }()

	announced := false
	announce := func() {
		if !announced {
			fmt.Println(ReadyLine)
			announced = true
		}
	}
	for {
		log.Printf("listing again: %v", b.listAndWatch(announce))
		time.Sleep(200 * time.Millisecond)
	}
}
