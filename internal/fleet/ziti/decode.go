package ziti

import (
	"encoding/json"
	"io"

	"github.com/go-openapi/runtime"
	"github.com/go-openapi/strfmt"
	"github.com/openziti/edge-api/rest_model"
)

// listConsumer decodes identity listings in one pass, keeping only what fromDetail reads; other
// answers go to next. The generated UnmarshalJSON decodes each identity twice: over 10,000
// identities that was a quarter of fleetctl's CPU.
func listConsumer(next runtime.Consumer) runtime.Consumer {
	return runtime.ConsumerFunc(func(r io.Reader, v any) error {
		env, ok := v.(*rest_model.ListIdentitiesEnvelope)
		if !ok {
			return next.Consume(r, v)
		}
		var lean struct {
			Data []leanIdentity   `json:"data"`
			Meta *rest_model.Meta `json:"meta"`
		}
		if err := json.NewDecoder(r).Decode(&lean); err != nil {
			return err
		}
		env.Meta = lean.Meta
		env.Data = make(rest_model.IdentityList, len(lean.Data))
		for i := range lean.Data {
			env.Data[i] = lean.Data[i].detail()
		}
		return nil
	})
}

type leanIdentity struct {
	ID                         *string                `json:"id"`
	Name                       *string                `json:"name"`
	RoleAttributes             *rest_model.Attributes `json:"roleAttributes"`
	HasEdgeRouterConnection    *bool                  `json:"hasEdgeRouterConnection"`
	EdgeRouterConnectionStatus *string                `json:"edgeRouterConnectionStatus"`
	HasAPISession              *bool                  `json:"hasApiSession"`
	EnvInfo                    *rest_model.EnvInfo    `json:"envInfo"`
	SdkInfo                    *rest_model.SdkInfo    `json:"sdkInfo"`
	Enrollment                 *struct {
		Ott *struct {
			JWT       string          `json:"jwt"`
			ExpiresAt strfmt.DateTime `json:"expiresAt"`
		} `json:"ott"`
	} `json:"enrollment"`
}

func (l *leanIdentity) detail() *rest_model.IdentityDetail {
	d := &rest_model.IdentityDetail{
		BaseEntity:                 rest_model.BaseEntity{ID: l.ID},
		Name:                       l.Name,
		RoleAttributes:             l.RoleAttributes,
		HasEdgeRouterConnection:    l.HasEdgeRouterConnection,
		EdgeRouterConnectionStatus: l.EdgeRouterConnectionStatus,
		HasAPISession:              l.HasAPISession,
		EnvInfo:                    l.EnvInfo,
		SdkInfo:                    l.SdkInfo,
	}
	if l.Enrollment != nil && l.Enrollment.Ott != nil {
		d.Enrollment = &rest_model.IdentityEnrollments{Ott: &rest_model.IdentityEnrollmentsOtt{
			JWT: l.Enrollment.Ott.JWT, ExpiresAt: l.Enrollment.Ott.ExpiresAt}}
	}
	return d
}
