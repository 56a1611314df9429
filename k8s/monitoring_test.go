package manifests

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The Prometheus Operator's ServiceMonitor and PrometheusRule
// (monitoring.coreos.com/v1), with only the fields the chart uses. As for
// cert-manager (certmanager_test.go), decoding is strict: a field added to
// the chart must be added here, checked against
// https://prometheus-operator.dev/docs/api-reference/api/.

type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              serviceMonitorSpec `json:"spec"`
}

type serviceMonitorSpec struct {
	JobLabel          string               `json:"jobLabel,omitempty"`
	Selector          metav1.LabelSelector `json:"selector"`
	NamespaceSelector *struct {
		MatchNames []string `json:"matchNames,omitempty"`
		Any        bool     `json:"any,omitempty"`
	} `json:"namespaceSelector,omitempty"`
	Endpoints []monitorEndpoint `json:"endpoints"`
}

type monitorEndpoint struct {
	Port          string     `json:"port,omitempty"`
	Path          string     `json:"path,omitempty"`
	Scheme        string     `json:"scheme,omitempty"`
	Interval      string     `json:"interval,omitempty"`
	ScrapeTimeout string     `json:"scrapeTimeout,omitempty"`
	TLSConfig     *tlsConfig `json:"tlsConfig,omitempty"`
}

type tlsConfig struct {
	ServerName string             `json:"serverName,omitempty"`
	CA         *secretOrConfig    `json:"ca,omitempty"`
	Cert       *secretOrConfig    `json:"cert,omitempty"`
	KeySecret  *secretKeySelector `json:"keySecret,omitempty"`
}

type secretOrConfig struct {
	Secret *secretKeySelector `json:"secret,omitempty"`
}

type secretKeySelector struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ruleFile `json:"spec"`
}

// ruleFile is a Prometheus rule file, which is also a PrometheusRule's spec.
type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name        string            `json:"name"`
	Interval    string            `json:"interval,omitempty"`
	Limit       int               `json:"limit,omitempty"`
	QueryOffset string            `json:"query_offset,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Rules       []rule            `json:"rules"`
}

type rule struct {
	Alert         string            `json:"alert,omitempty"`
	Record        string            `json:"record,omitempty"`
	Expr          string            `json:"expr"`
	For           string            `json:"for,omitempty"`
	KeepFiringFor string            `json:"keep_firing_for,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}
