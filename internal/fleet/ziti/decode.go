package ziti

import (
	"fmt"
	"io"

	"github.com/go-openapi/runtime"
	"github.com/go-openapi/strfmt"
	"github.com/openziti/edge-api/rest_model"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/strictjson"
)

// listConsumer decodes the identity and authenticator listings in one pass as they stream in,
// keeping only what fromDetail and certPage read; other answers go to next. The generated
// UnmarshalJSON decodes each item twice (over 10,000 identities that was a quarter of
// fleetctl's CPU, over 10,000 authenticators more than a third). The listings are read as
// strictly as tenancy's answers (strictjson): keys matched exactly, none given twice, valid
// UTF-8, a wrong type refused naming its member; members fleetctl does not read are ignored.
// Every answer is read to at most maxListing bytes.
func listConsumer(next runtime.Consumer) runtime.Consumer {
	return runtime.ConsumerFunc(func(r io.Reader, v any) error {
		r = capread.New(r, maxListing, errTooLarge)
		switch env := v.(type) {
		case *rest_model.ListIdentitiesEnvelope:
			var lean struct {
				Data []leanIdentity `json:"data"`
				Meta *leanMeta      `json:"meta"`
			}
			if err := strictjson.Decode(r, &lean); err != nil {
				return err
			}
			env.Meta = lean.Meta.meta()
			env.Data = make(rest_model.IdentityList, len(lean.Data))
			for i := range lean.Data {
				env.Data[i] = lean.Data[i].detail()
			}
			return nil
		case *rest_model.ListAuthenticatorsEnvelope:
			var lean struct {
				Data []*leanAuthenticator `json:"data"`
				Meta *leanMeta            `json:"meta"`
			}
			if err := strictjson.Decode(r, &lean); err != nil {
				return err
			}
			env.Meta = lean.Meta.meta()
			env.Data = make(rest_model.AuthenticatorList, len(lean.Data))
			for i, a := range lean.Data {
				env.Data[i] = a.detail()
			}
			return nil
		}
		return next.Consume(r, v)
	})
}

// maxListing bounds one answer of the controller, as admin's maxBody bounds tenancy's: a page
// of 500 identities or authenticators is a few hundred KiB, so one beyond it is a broken
// controller or proxy, refused rather than read into memory whole.
const maxListing = 64 << 20

var errTooLarge = fmt.Errorf("ziti: answer larger than %d bytes: a listing page is a few hundred KiB; is the controller behind a proxy that sends something else?", maxListing)

// leanMeta is the pagination of a listing's meta; nil stays nil (the caller refuses it).
type leanMeta struct {
	Pagination *struct {
		Limit      *int64 `json:"limit"`
		Offset     *int64 `json:"offset"`
		TotalCount *int64 `json:"totalCount"`
	} `json:"pagination"`
}

func (m *leanMeta) meta() *rest_model.Meta {
	if m == nil {
		return nil
	}
	out := &rest_model.Meta{}
	if p := m.Pagination; p != nil {
		out.Pagination = &rest_model.Pagination{Limit: p.Limit, Offset: p.Offset, TotalCount: p.TotalCount}
	}
	return out
}

type leanIdentity struct {
	ID                         *string                `json:"id"`
	Name                       *string                `json:"name"`
	RoleAttributes             *rest_model.Attributes `json:"roleAttributes"`
	HasEdgeRouterConnection    *bool                  `json:"hasEdgeRouterConnection"`
	EdgeRouterConnectionStatus *string                `json:"edgeRouterConnectionStatus"`
	HasAPISession              *bool                  `json:"hasApiSession"`
	EnvInfo                    *struct {
		Hostname string `json:"hostname"`
	} `json:"envInfo"`
	SdkInfo *struct {
		AppID   string `json:"appId"`
		Type    string `json:"type"`
		Version string `json:"version"`
	} `json:"sdkInfo"`
	Enrollment *struct {
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
	}
	if l.EnvInfo != nil {
		d.EnvInfo = &rest_model.EnvInfo{Hostname: l.EnvInfo.Hostname}
	}
	if l.SdkInfo != nil {
		d.SdkInfo = &rest_model.SdkInfo{AppID: l.SdkInfo.AppID, Type: l.SdkInfo.Type, Version: l.SdkInfo.Version}
	}
	if l.Enrollment != nil && l.Enrollment.Ott != nil {
		d.Enrollment = &rest_model.IdentityEnrollments{Ott: &rest_model.IdentityEnrollmentsOtt{
			JWT: l.Enrollment.Ott.JWT, ExpiresAt: l.Enrollment.Ott.ExpiresAt}}
	}
	return d
}

// leanAuthenticator is what certPage reads of an authenticator.
type leanAuthenticator struct {
	IdentityID        *string `json:"identityId"`
	Method            *string `json:"method"`
	CertPem           string  `json:"certPem"`
	Fingerprint       string  `json:"fingerprint"`
	IsIssuedByNetwork bool    `json:"isIssuedByNetwork"`
}

func (l *leanAuthenticator) detail() *rest_model.AuthenticatorDetail {
	if l == nil {
		return nil
	}
	return &rest_model.AuthenticatorDetail{IdentityID: l.IdentityID, Method: l.Method, CertPem: l.CertPem,
		Fingerprint: l.Fingerprint, IsIssuedByNetwork: l.IsIssuedByNetwork}
}
