"""Identity providers the tests log in with, run locally as real servers:

    oidc.py    an OIDC token issuer (client credentials grant, RS256 JWTs, JWKS) standing in
               for Keycloak, Okta or Entra ID: Kafka's OAUTHBEARER listener validates its tokens
    kdc.py     a Kerberos KDC, for GSSAPI
"""
