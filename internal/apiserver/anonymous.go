package apiserver

import (
	"context"
	"net/http"
	"path"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Anonymous access is limited to the probe and version paths, as
// kube-apiserver's default RBAC (system:public-info-viewer) allows: kubelet
// probes and load balancers check /livez and /readyz without credentials,
// and they got 401 here. Every other path stays 401 for a request without a
// valid token, so nothing else is readable anonymously.
var anonymousPaths = []string{"/healthz", "/livez", "/readyz", "/version"}

// isAnonymousPath reports whether p is one of anonymousPaths or a check below
// a probe (/readyz/etcd, /livez/poststarthook/...). Only clean paths count,
// so no "..", "//" or escaped form reaches another handler through it.
func isAnonymousPath(p string) bool {
	if p == "" || path.Clean(p) != p {
		return false
	}
	for _, allowed := range anonymousPaths {
		if p == allowed || (allowed != "/version" && strings.HasPrefix(p, allowed+"/")) {
			return true
		}
	}
	return false
}

// newAuthenticator accepts the admin token, then the extra authenticators
// (token file, delegated authentication) in order, and anonymous requests to
// the probe and version paths only. (The server's own loopback token is
// added by k8s.io/apiserver when the config is completed.)
func newAuthenticator(adminToken string, extra ...authenticator.Request) authenticator.Request {
	tokens := authenticatorfactory.NewFromTokens(map[string]*user.DefaultInfo{
		adminToken: {Name: "admin", UID: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
	}, nil)
	anonymous := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead || req.URL.RawPath != "" || !isAnonymousPath(req.URL.Path) {
			return nil, false, nil
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}, true, nil
	})
	chain := append([]authenticator.Request{tokens}, extra...)
	return union.New(append(chain, anonymous)...)
}

// withoutAnonymous drops the anonymous identity from an authenticator.
// k8s.io/apiserver's delegated authenticator always ends in an anonymous
// one (DelegatingAuthenticationOptions.ApplyTo hard-codes it), which turned
// every request without valid credentials, a client certificate of another
// CA included, into system:anonymous and a 403 instead of the 401 this
// server gives; anonymous requests are ours to decide (probes only).
type withoutAnonymous struct{ authenticator.Request }

func (w withoutAnonymous) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	resp, ok, err := w.Request.AuthenticateRequest(req)
	if ok && resp != nil && resp.User != nil && resp.User.GetName() == user.Anonymous {
		return nil, false, err
	}
	return resp, ok, err
}

// anonymousLimiter lets the anonymous user only read anonymousPaths: a
// second fence behind the authenticator. Every other user is decided by
// delegate (SubjectAccessReview with --authorization-kubeconfig) or, without
// one, allowed everything: the zero-config server's only identities are the
// admin token and the loopback client.
type anonymousLimiter struct {
	delegate authorizer.Authorizer
}

func (l anonymousLimiter) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil || u.GetName() != user.Anonymous {
		if l.delegate != nil {
			return l.delegate.Authorize(ctx, a)
		}
		return authorizer.DecisionAllow, "", nil
	}
	if !a.IsResourceRequest() && a.GetVerb() == "get" && isAnonymousPath(a.GetPath()) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionDeny, "anonymous requests may only read " + strings.Join(anonymousPaths, ", "), nil
}

// ConditionsAwareAuthorize is not conditions-aware: it converts Authorize.
func (l anonymousLimiter) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(l.Authorize(ctx, a))
}

// EvaluateConditions fails closed: there are no conditions to evaluate.
func (anonymousLimiter) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}
