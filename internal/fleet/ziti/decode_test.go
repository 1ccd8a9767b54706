package ziti

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-openapi/runtime"
	"github.com/go-openapi/strfmt"
	"github.com/openziti/edge-api/rest_model"
)

// The one-pass decoder must give fromDetail exactly what the generated decoder gives it.
func TestListConsumerMatchesTheGeneratedDecoder(t *testing.T) {
	id, name, status := "zid1", "monky-host.env-a", "online"
	on := true
	attrs := rest_model.Attributes{"monky-deploy-agent", "x"}
	total, limit, offset := int64(1), int64(500), int64(0)
	full := rest_model.ListIdentitiesEnvelope{
		Data: rest_model.IdentityList{{
			BaseEntity: rest_model.BaseEntity{ID: &id}, Name: &name, RoleAttributes: &attrs,
			HasEdgeRouterConnection: &on, HasAPISession: &on, EdgeRouterConnectionStatus: &status,
			EnvInfo: &rest_model.EnvInfo{Hostname: "dev-01", Os: "linux"}, SdkInfo: &rest_model.SdkInfo{Version: "1.6.8", AppID: "ziti-edge-tunnel"},
			Enrollment: &rest_model.IdentityEnrollments{Ott: &rest_model.IdentityEnrollmentsOtt{JWT: "eyJ.x.y",
				ExpiresAt: strfmt.DateTime(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))}},
		}, {BaseEntity: rest_model.BaseEntity{ID: &id}, Name: &name}},
		Meta: &rest_model.Meta{Pagination: &rest_model.Pagination{TotalCount: &total, Limit: &limit, Offset: &offset}},
	}
	body, err := json.Marshal(&full)
	if err != nil {
		t.Fatal(err)
	}
	var stock, lean rest_model.ListIdentitiesEnvelope
	if err := runtime.JSONConsumer().Consume(bytes.NewReader(body), &stock); err != nil {
		t.Fatal(err)
	}
	if err := listConsumer(runtime.JSONConsumer()).Consume(bytes.NewReader(body), &lean); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(stock.Meta, lean.Meta) || len(stock.Data) != len(lean.Data) {
		t.Fatalf("meta or length differ")
	}
	for i := range stock.Data {
		a, errA := fromDetail(stock.Data[i])
		b, errB := fromDetail(lean.Data[i])
		if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("item %d: generated %+v (%v), one-pass %+v (%v)", i, a, errA, b, errB)
		}
	}
	// Other answers are left to the stock consumer.
	var env rest_model.DetailIdentityEnvelope
	if err := listConsumer(runtime.JSONConsumer()).Consume(bytes.NewReader([]byte(`{"data":{"id":"z","name":"n"},"meta":{}}`)), &env); err != nil || *env.Data.Name != "n" {
		t.Errorf("detail: %v", err)
	}
}

// The one-pass authenticator decoder gives certPage what the generated decoder gives it.
func TestListConsumerAuthenticatorsMatchTheGeneratedDecoder(t *testing.T) {
	zid, aid, method, other := "zid1", "a1", "cert", "updb"
	total, limit, offset := int64(2), int64(500), int64(0)
	full := rest_model.ListAuthenticatorsEnvelope{
		Data: rest_model.AuthenticatorList{
			{BaseEntity: rest_model.BaseEntity{ID: &aid}, IdentityID: &zid, Method: &method, CertPem: "-----BEGIN CERTIFICATE-----\n…",
				Fingerprint: "ab12", IsIssuedByNetwork: true, Identity: &rest_model.EntityRef{ID: zid, Name: "monky-host.env-a"}},
			{BaseEntity: rest_model.BaseEntity{ID: &aid}, IdentityID: &zid, Method: &other, Username: "u"},
		},
		Meta: &rest_model.Meta{Pagination: &rest_model.Pagination{TotalCount: &total, Limit: &limit, Offset: &offset}},
	}
	body, err := json.Marshal(&full)
	if err != nil {
		t.Fatal(err)
	}
	var stock, lean rest_model.ListAuthenticatorsEnvelope
	if err := runtime.JSONConsumer().Consume(bytes.NewReader(body), &stock); err != nil {
		t.Fatal(err)
	}
	if err := listConsumer(runtime.JSONConsumer()).Consume(bytes.NewReader(body), &lean); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(stock.Meta.Pagination, lean.Meta.Pagination) || len(stock.Data) != len(lean.Data) {
		t.Fatalf("meta or length differ")
	}
	for i := range stock.Data {
		a, b := stock.Data[i], lean.Data[i]
		if *a.IdentityID != *b.IdentityID || *a.Method != *b.Method || a.CertPem != b.CertPem || a.Fingerprint != b.Fingerprint || a.IsIssuedByNetwork != b.IsIssuedByNetwork {
			t.Errorf("item %d: generated %+v, one-pass %+v", i, a, b)
		}
	}
}

// The listings are read as strictly as tenancy's answers: a key given twice, or a member of the
// wrong type, fails the page naming the member; a member in another case is not the field.
func TestListConsumerIsStrict(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
		v                any
	}{
		{"identity id twice", `{"data":[{"id":"a","id":"b","name":"n"}],"meta":{}}`, `"data.id" given twice`, &rest_model.ListIdentitiesEnvelope{}},
		{"online as a string", `{"data":[{"id":"a","name":"n","hasEdgeRouterConnection":"yes"}],"meta":{}}`,
			`unexpected JSON string at "data.hasEdgeRouterConnection"`, &rest_model.ListIdentitiesEnvelope{}},
		{"totalCount as a string", `{"data":[],"meta":{"pagination":{"totalCount":"3"}}}`,
			`unexpected JSON string at "meta.pagination.totalCount"`, &rest_model.ListAuthenticatorsEnvelope{}},
		{"certPem twice", `{"data":[{"identityId":"a","certPem":"x","certPem":"y"}],"meta":{}}`, `"data.certPem" given twice`, &rest_model.ListAuthenticatorsEnvelope{}},
		{"trailing data", `{"data":[],"meta":{}} {}`, "trailing data", &rest_model.ListAuthenticatorsEnvelope{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := listConsumer(runtime.JSONConsumer()).Consume(bytes.NewReader([]byte(tc.body)), tc.v)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Consume = %v, want %q", err, tc.want)
			}
		})
	}
	var env rest_model.ListIdentitiesEnvelope
	err := listConsumer(runtime.JSONConsumer()).Consume(bytes.NewReader([]byte(`{"data":[{"ID":"x","id":"a","name":"n"}],"meta":{}}`)), &env)
	if err != nil || *env.Data[0].ID != "a" {
		t.Fatalf("ID in another case: %v", err)
	}
}
