package manifests

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// cert-manager's Certificate and Issuer (cert-manager.io/v1), with only the
// fields the secure component uses. Decoding is strict, so a field spelled
// wrong or not listed here fails the render test: add it here, checked
// against https://cert-manager.io/docs/reference/api-docs/, when the
// manifests start using it. (No cert-manager Go module: its dependency tree
// is far larger than these few fields.)

type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              certificateSpec `json:"spec"`
}

type certificateSpec struct {
	SecretName  string          `json:"secretName"`
	CommonName  string          `json:"commonName,omitempty"`
	DNSNames    []string        `json:"dnsNames,omitempty"`
	IsCA        bool            `json:"isCA,omitempty"`
	Duration    string          `json:"duration,omitempty"`
	RenewBefore string          `json:"renewBefore,omitempty"`
	Usages      []string        `json:"usages,omitempty"`
	PrivateKey  *certPrivateKey `json:"privateKey,omitempty"`
	IssuerRef   issuerRef       `json:"issuerRef"`
}

type certPrivateKey struct {
	Algorithm      string `json:"algorithm,omitempty"`
	Size           int    `json:"size,omitempty"`
	RotationPolicy string `json:"rotationPolicy,omitempty"`
}

type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

type issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              issuerSpec `json:"spec"`
}

type issuerSpec struct {
	SelfSigned *struct{} `json:"selfSigned,omitempty"`
	CA         *issuerCA `json:"ca,omitempty"`
}

type issuerCA struct {
	SecretName string `json:"secretName"`
}
