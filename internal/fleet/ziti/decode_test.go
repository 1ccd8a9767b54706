package ziti

import (
	"bytes"
	"encoding/json"
	"reflect"
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
