package ec2ssm

import (
	"errors"
	"fmt"

	"github.com/aws/smithy-go"

	"github.com/sandgate/sandgate/internal/fault"
)

// policyCodes are AWS error codes that mean the identity may not do what was asked, or is not
// accepted at all: STS (AssumeRole, AssumeRoleWithWebIdentity) and SSM alike.
var policyCodes = map[string]bool{
	"AccessDenied":                true,
	"AccessDeniedException":       true,
	"UnauthorizedOperation":       true,
	"ExpiredToken":                true,
	"ExpiredTokenException":       true,
	"InvalidIdentityToken":        true,
	"IDPRejectedClaim":            true,
	"InvalidClientTokenId":        true,
	"UnrecognizedClientException": true,
	"RegionDisabledException":     true,
}

// apiCode returns the code of the AWS API error in err's chain, or "".
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// classify turns an AWS error into a fault: access denied and rejected identities are
// fault.Policy, InvalidInstanceId is fault.Gone, anything else fault.Provision. The message
// is format and args followed by the AWS error (which names the operation, the HTTP status
// and AWS's own message; it never contains credentials or tokens).
func classify(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	code := apiCode(err)
	switch {
	case policyCodes[code]:
		return fault.Wrap(fault.Policy, err, "%s: AWS refused the identity", msg)
	case code == "InvalidInstanceId":
		return fault.Wrap(fault.Gone, err, "%s: SSM does not know the instance or cannot reach it", msg)
	}
	return fault.Wrap(fault.Provision, err, "%s", msg)
}
