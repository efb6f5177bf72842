# One kubernetes provider per region slot. Terraform needs provider aliases to be static, so the
# root module has a fixed number of slots (0..4); a region picks its slot in var.regions and keeps
# it for life. Each region's modules (modules/region as module.region_<slot>, and modules/ledger
# as module.ledger_<slot> when it is the ledger region) are bound to their slot's provider and to
# no other: whatever Terraform destroys for a region, it destroys through that region's cluster.
#
# No slot ever falls back to an ambient cluster. A region's slot is configured only from its
# `kube` (a kubeconfig file AND context, or host + CA + exec: variables.tf refuses anything
# less). A slot that no region uses points at https://unused-slot-<n>.quota.invalid, a name
# that never resolves (RFC 6761): not the current kube context, not in-cluster config. Resources
# still in the state for such a slot (a region deleted from var.regions without the decommission
# step, deploy/RUNBOOK.md "Removing a region") then fail to refresh, and nothing is destroyed in
# whatever cluster happens to be current. Unset KUBE_* environment variables when running
# Terraform: the provider reads them for attributes left null here.
#
# To add slots, copy one provider block here and one module block of each kind in regions.tf and
# ledger.tf, extend local.slots, raise the limits in the regions validation (variables.tf), and
# add the alias to the tests' mock_provider lists. deploy/terraform/hclcheck_test.go fails when
# these drift apart.

locals {
  slots        = ["0", "1", "2", "3", "4"]
  kube_by_slot = { for name, r in var.regions : tostring(r.slot) => r.kube }
  kube = {
    for s in local.slots : s => lookup(local.kube_by_slot, s, {
      config_path            = null
      context                = null
      host                   = "https://unused-slot-${s}.quota.invalid"
      cluster_ca_certificate = null
      exec                   = null
    })
  }
  # What each slot's provider points at, for the output kube_targets (no credentials).
  kube_target = {
    for s, k in local.kube : s => (
      k.host == null ? "kubeconfig ${k.config_path} context ${k.context}" : k.host
    )
  }
}

provider "kubernetes" {
  alias                  = "slot0"
  config_path            = local.kube["0"].config_path
  config_context         = local.kube["0"].context
  host                   = local.kube["0"].host
  cluster_ca_certificate = local.kube["0"].cluster_ca_certificate

  dynamic "exec" {
    for_each = local.kube["0"].exec == null ? [] : [local.kube["0"].exec]
    content {
      api_version = exec.value.api_version
      command     = exec.value.command
      args        = exec.value.args
      env         = exec.value.env
    }
  }
}

provider "kubernetes" {
  alias                  = "slot1"
  config_path            = local.kube["1"].config_path
  config_context         = local.kube["1"].context
  host                   = local.kube["1"].host
  cluster_ca_certificate = local.kube["1"].cluster_ca_certificate

  dynamic "exec" {
    for_each = local.kube["1"].exec == null ? [] : [local.kube["1"].exec]
    content {
      api_version = exec.value.api_version
      command     = exec.value.command
      args        = exec.value.args
      env         = exec.value.env
    }
  }
}

provider "kubernetes" {
  alias                  = "slot2"
  config_path            = local.kube["2"].config_path
  config_context         = local.kube["2"].context
  host                   = local.kube["2"].host
  cluster_ca_certificate = local.kube["2"].cluster_ca_certificate

  dynamic "exec" {
    for_each = local.kube["2"].exec == null ? [] : [local.kube["2"].exec]
    content {
      api_version = exec.value.api_version
      command     = exec.value.command
      args        = exec.value.args
      env         = exec.value.env
    }
  }
}

provider "kubernetes" {
  alias                  = "slot3"
  config_path            = local.kube["3"].config_path
  config_context         = local.kube["3"].context
  host                   = local.kube["3"].host
  cluster_ca_certificate = local.kube["3"].cluster_ca_certificate

  dynamic "exec" {
    for_each = local.kube["3"].exec == null ? [] : [local.kube["3"].exec]
    content {
      api_version = exec.value.api_version
      command     = exec.value.command
      args        = exec.value.args
      env         = exec.value.env
    }
  }
}

provider "kubernetes" {
  alias                  = "slot4"
  config_path            = local.kube["4"].config_path
  config_context         = local.kube["4"].context
  host                   = local.kube["4"].host
  cluster_ca_certificate = local.kube["4"].cluster_ca_certificate

  dynamic "exec" {
    for_each = local.kube["4"].exec == null ? [] : [local.kube["4"].exec]
    content {
      api_version = exec.value.api_version
      command     = exec.value.command
      args        = exec.value.args
      env         = exec.value.env
    }
  }
}

locals {
  # slot => region name, decommissioned regions included (their slot still points at them).
  slot_of_any_region = { for name, r in var.regions : tostring(r.slot) => name }
}
