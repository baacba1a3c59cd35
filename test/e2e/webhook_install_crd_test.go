package e2e

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// crdSchemas are the objects of CRDs the webhook's install uses
// (cert-manager's, the Prometheus Operator's), as the fields of their
// schemas that the install sets: a strict decode refuses a misspelt or
// misplaced field, though not every rule of the real CRD (which these
// tests cannot install). The field names are those of cert-manager.io/v1
// and monitoring.coreos.com/v1.
var crdSchemas = map[string]func() any{
	"cert-manager.io/v1/Issuer":               func() any { return &cmIssuer{} },
	"cert-manager.io/v1/Certificate":          func() any { return &cmCertificate{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &promServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &promRule{} },
}

type cmIssuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

type cmCertificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		IsCA        bool     `json:"isCA,omitempty"`
		CommonName  string   `json:"commonName,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		SecretName  string   `json:"secretName"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef struct {
			Kind  string `json:"kind,omitempty"`
			Name  string `json:"name"`
			Group string `json:"group,omitempty"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

type promServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port      string `json:"port,omitempty"`
			Scheme    string `json:"scheme,omitempty"`
			Path      string `json:"path,omitempty"`
			Interval  string `json:"interval,omitempty"`
			TLSConfig *struct {
				ServerName string `json:"serverName,omitempty"`
				CA         struct {
					Secret *struct {
						Name string `json:"name"`
						Key  string `json:"key"`
					} `json:"secret,omitempty"`
				} `json:"ca"`
			} `json:"tlsConfig,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type promRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert,omitempty"`
				Record      string            `json:"record,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}
