#!/bin/sh
# The contrastive embedder on a real GPU (the device tool's H100 80GB HBM3, torch 2.11.0+cu130,
# transformers 5.17.0, PEFT 0.21.0): the model of examples/contrastive-embedder/embedder/model.py
# build() written out inline (the device machine gets a checkout without the example), with
# the same encoder config, LoRA (r 8, dropout 0.05, query and value; lora_alpha and the
# learning rate, which take no memory, left at their defaults), dense top-2 MoE fusion,
# projection and InfoNCE, and the workload tracer's loop: two steps of forward and loss under
# bf16 autocast, backward, fused AdamW, zero_grad. Each point in a fresh process; one JSON
# line each with max_memory_allocated and max_memory_reserved over the whole run. Results:
# workload_gpu_h100.jsonl. Run from any folder on a machine with a GPU: sh workload_gpu.sh; OUT=DIR
# names where w.jsonl goes.
: "${OUT:=.}"
cat>/tmp/m.py<<'E'
import json,sys,torch,transformers as tf,peft
from torch import nn
import torch.nn.functional as F
C=tf.BertConfig(hidden_size=512,num_hidden_layers=8,num_attention_heads=8,intermediate_size=2048)
T={"title":24,"description":128,"examples":64,"excluded":32}
def enc():
 e=tf.BertModel(C);f=getattr(e,"activation_checkpointing_enable",None)
 f() if f else e.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant":False})
 return peft.get_peft_model(e,peft.LoraConfig(r=8,lora_dropout=0.05,target_modules=["query","value"]))
class M(nn.Module):
 def __init__(s):
  super().__init__();s.e=nn.ModuleDict({c:enc() for c in T});s.r=nn.Linear(2048,4);s.p=nn.Linear(384,256)
  s.x=nn.ModuleList(nn.Sequential(nn.Linear(2048,768),nn.GELU(),nn.Linear(768,384)) for _ in range(4))
 def forward(s,b):
  x=torch.cat([s.e[c](**b[c]).pooler_output for c in T],-1)
  q=s.r(x).float().softmax(-1);w,i=q.topk(2,-1);g=torch.zeros_like(q).scatter(-1,i,w/w.sum(-1,keepdim=True));o=0
  for k,m in enumerate(s.x):o=o+m(x)*g[:,k:k+1]
  return F.normalize(s.p(o).float(),dim=-1)
B,N,P=json.loads(sys.argv[1]);K=P+N
m=M().cuda().train();opt=torch.optim.AdamW([p for p in m.parameters() if p.requires_grad],fused=True)
for _ in range(2):
 b={}
 for c,L in T.items():
  t=torch.randint(1,30522,(B*(1+K),L),device="cuda");b[c]={"input_ids":t,"attention_mask":torch.ones_like(t)}
 with torch.autocast("cuda",dtype=torch.bfloat16):
  e=m(b);G=e.view(B,1+K,-1);a=G[:,0];d=G[:,1:].reshape(B*K,-1)
  l=((a@d.T).float()/0.05).log_softmax(-1).view(B,B,K);r=torch.arange(B,device="cuda")
  loss=-torch.logsumexp(l[r,r,:P],-1).mean()
 loss.backward();opt.step();opt.zero_grad(set_to_none=True);del b,e,loss,l
print(json.dumps({"batch":B,"n_negatives":N,"n_positives":P,"allocated_bytes":torch.cuda.max_memory_allocated(),"reserved_bytes":torch.cuda.max_memory_reserved()}))
E
for p in 4,16,16 8,16,16 16,16,16 4,32,16 86,17,16;do python3 /tmp/m.py "[$p]" 2>&1|tail -1|tee -a $OUT/w.jsonl;done
